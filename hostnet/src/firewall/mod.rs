//! Firewall rules: ipMasq (iptables and nftables backends) and macspoofchk.
