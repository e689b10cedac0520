//! Netlink attributes (TLV, 4-byte aligned) as nf_tables uses them: integers in
//! network byte order, strings NUL-terminated, nested attributes flagged `NLA_F_NESTED`.

const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// A sequence of attributes being built.
#[derive(Debug, Default, Clone)]
pub struct Attrs(pub Vec<u8>);

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    pub fn bytes(&mut self, ty: u16, value: &[u8]) -> &mut Self {
        self.put(ty, value);
        self
    }

    pub fn str(&mut self, ty: u16, value: &str) -> &mut Self {
        let mut v = value.as_bytes().to_vec();
        v.push(0);
        self.put(ty, &v);
        self
    }

    pub fn u32(&mut self, ty: u16, value: u32) -> &mut Self {
        self.put(ty, &value.to_be_bytes());
        self
    }

    pub fn u64(&mut self, ty: u16, value: u64) -> &mut Self {
        self.put(ty, &value.to_be_bytes());
        self
    }

    pub fn nested(&mut self, ty: u16, build: impl FnOnce(&mut Attrs)) -> &mut Self {
        let mut inner = Attrs::new();
        build(&mut inner);
        self.put(ty | NLA_F_NESTED, &inner.0);
        self
    }

    fn put(&mut self, ty: u16, value: &[u8]) {
        // Every value we build is far below the 64 KiB an attribute can hold; the
        // set element lists that could grow are split into messages before that.
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&ty.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize(align(self.0.len()), 0);
    }
}

/// The attributes in `buf` as (type without flags, value); a truncated tail is ignored.
pub fn parse(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
        let ty = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            break;
        }
        out.push((ty, &buf[4..len]));
        buf = &buf[align(len).min(buf.len())..];
    }
    out
}

/// The value of the first attribute of type `ty`.
pub fn find(attrs: &[(u16, &[u8])], ty: u16) -> Option<Vec<u8>> {
    attrs
        .iter()
        .find(|(t, _)| *t == ty)
        .map(|(_, v)| v.to_vec())
}

/// A NUL-terminated string value.
pub fn as_str(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

pub fn as_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.get(..4)?.try_into().ok()?))
}

pub fn as_u64(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_with_padding_and_nesting() {
        let mut a = Attrs::new();
        a.str(1, "cni-rs").u32(2, 0x0102_0304).nested(3, |n| {
            n.bytes(1, &[10, 0, 0]);
        });
        // "cni-rs\0" is 7 bytes: 11 with the header, padded to 12.
        assert_eq!(&a.0[..4], &[11, 0, 1, 0]);
        let parsed = parse(&a.0);
        assert_eq!(parsed.len(), 3);
        assert_eq!(as_str(parsed[0].1), "cni-rs");
        assert_eq!(as_u32(parsed[1].1), Some(0x0102_0304));
        assert_eq!(parsed[2].0, 3, "the nested flag is masked off");
        assert_eq!(parse(parsed[2].1), vec![(1, &[10u8, 0, 0][..])]);
    }

    #[test]
    fn a_truncated_buffer_yields_what_is_whole() {
        let mut a = Attrs::new();
        a.u32(1, 7).u32(2, 8);
        let cut = &a.0[..a.0.len() - 2];
        assert_eq!(parse(cut).len(), 1);
        assert!(parse(&[0xff, 0xff, 1]).is_empty());
    }
}
