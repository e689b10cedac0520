#!/usr/bin/env bash
# Checks deploy/*.yaml against the Kubernetes API schema (Debian's python3-kubernetes
# models: unknown or misspelled fields, wrong types and missing required fields fail)
# and the fields the installer relies on. Installs python3-kubernetes when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's python, not a pyenv/venv one: that is where the apt package lands.
py=/usr/bin/python3
# shellcheck source=scripts/packages.sh
source scripts/packages.sh
need_packages "the manifest check" /usr/lib/python3/dist-packages/kubernetes:python3-kubernetes \
    /usr/lib/python3/dist-packages/yaml:python3-yaml
exec "$py" scripts/check_manifests.py deploy/*.yaml
