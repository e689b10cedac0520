#!/usr/bin/env bash
# Checks deploy/*.yaml against the Kubernetes API schema (Debian's python3-kubernetes
# models: unknown or misspelled fields, wrong types and missing required fields fail)
# and the fields the installer relies on. Installs python3-kubernetes when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's python, not a pyenv/venv one: that is where the apt package lands.
py=/usr/bin/python3
if ! "$py" -c 'import kubernetes, yaml' 2>/dev/null; then
    if [[ $EUID -ne 0 ]]; then
        echo "check-manifests: needs python3-kubernetes: sudo apt-get install python3-kubernetes" >&2
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-kubernetes python3-yaml >/dev/null
fi
exec "$py" scripts/check_manifests.py deploy/*.yaml
