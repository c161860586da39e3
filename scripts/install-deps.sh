#!/usr/bin/env bash
# Installs what the suite needs on Debian 12 (run as root): Slurm + munge from Debian,
# and a project virtual environment in .venv with the package and its test tools; then,
# when the Slurm 25.11.2 source tarball is there ($SLURM_EXT_SLURM_TARBALL, or the vendored
# copy beside the checkout), Slurm 25.11 built into a cache outside the checkout and pyslurm
# built against it (scripts/install-slurm2511.sh; WITH_SLURM2511=0 skips it). Idempotent: skips apt and the builds when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
# prometheus: only for promtool (tests/test_promtool.py checks both exporters' output with
# `promtool check metrics`); Debian ships promtool in no smaller package (19 MB download,
# 96 MB installed, ~12 s here). The server it brings is not wanted: stopped and disabled below.
# chromium: the user view's page is tested in headless Chromium (tests/test_userview_live.py)
PKGS="slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins lua5.1 lua5.3 slurmdbd mariadb-server prometheus chromium"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "installing Debian packages:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq -o DPkg::Lock::Timeout=600 $missing >/dev/null
  case " $missing " in
    *" prometheus "*)
      if [ -d /run/systemd/system ]; then  # the package enables and starts its server
        systemctl disable --now prometheus.service >/dev/null 2>&1 || true
        echo "prometheus installed for promtool only: its server was stopped and disabled" >&2
      fi ;;
  esac
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
quiet() { grep -v "is ignored: it is neither" || true; }  # pip's noise about absent local indexes
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | quiet
test "${PIPESTATUS[0]}" -eq 0 || { echo "pip install -e '.[test]' failed" >&2; exit 1; }
if [ "${WITH_TORCH:-1}" = "1" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # CPU build for the template tests (tiny gloo training); they skip, saying so, without it.
  .venv/bin/pip install -q --disable-pip-version-check torch==2.13.0 2>&1 | quiet
  .venv/bin/python -c "import torch" 2>/dev/null \
    || echo "torch not installed: the template training tests will be skipped" >&2
fi
if [ "${WITH_SLURM2511:-1}" = "1" ]; then
  bash scripts/install-slurm2511.sh  # says so and skips when there is no tarball
fi
