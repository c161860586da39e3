#!/usr/bin/env bash
# Builds Slurm 25.11.2 from the vendored tarball into a cache outside the checkout (once per
# machine, keyed by the tarball's hash) and pyslurm 25.11.2 against it into .venv. The 25.11
# tests find the prefix through the file .venv/slurm2511-prefix this script writes (or
# $SLURM_EXT_SLURM2511_PREFIX). Measured on a 2-core machine shared with other work:
# Slurm configure+deps 48 s, make 144 s, install 19 s; pyslurm 153 s.
# Usage: scripts/install-slurm2511.sh [tarball]   (default: $SLURM_EXT_SLURM_TARBALL, else
# the vendored copy in shared/vendor beside the checkout, as the project's CI lays it out)
# Env: SLURM_EXT_SLURM_CACHE (default /var/cache/slurm-ext), WITH_PYSLURM=0 to skip pyslurm.
set -euo pipefail
cd "$(dirname "$0")/.."
TARBALL=${1:-${SLURM_EXT_SLURM_TARBALL:-$(dirname "$PWD")/shared/vendor/slurm-25.11.2.tar.gz}}
[ -f "$TARBALL" ] || { echo "no Slurm tarball at $TARBALL: the 25.11 tests will be skipped" >&2; exit 0; }
CACHE=${SLURM_EXT_SLURM_CACHE:-/var/cache/slurm-ext}
SHA=$(sha256sum "$TARBALL" | cut -c1-12)
PREFIX="$CACHE/slurm-25.11.2-$SHA"
DEPS="build-essential pkg-config python3-dev munge libmunge-dev libjson-c-dev libyaml-dev
  libhttp-parser-dev libjwt-dev liblua5.3-dev libpam0g-dev libhwloc-dev libdbus-1-dev
  liblz4-dev libmariadb-dev"
t0=$(date +%s)
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9  # one build per machine at a time; a second run waits, then finds it built
if [ ! -f "$PREFIX/.complete" ]; then
  missing=""
  for p in $DEPS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "installing build deps:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq $missing >/dev/null
  fi
  BUILD=$(mktemp -d "$CACHE/build.XXXXXX")
  trap 'rm -rf "$BUILD"' EXIT
  tar -xf "$TARBALL" -C "$BUILD"
  cd "$BUILD"/slurm-25.11.2
  echo "configuring Slurm 25.11.2 into $PREFIX" >&2
  ./configure -q --prefix="$PREFIX" --enable-multiple-slurmd --with-json --with-yaml \
    --with-lua --with-munge >configure.log 2>&1 || { tail -30 configure.log >&2; exit 1; }
  t1=$(date +%s)
  make -s -j"$(nproc)" >make.log 2>&1 || { tail -40 make.log >&2; exit 1; }
  t2=$(date +%s)
  rm -rf "$PREFIX"
  make -s install >install.log 2>&1 || { tail -40 install.log >&2; exit 1; }
  t3=$(date +%s)
  cd - >/dev/null
  # The prefix is baked into the binaries (rpath of libslurmfull), so install in place and
  # mark it complete last: an interrupted build is redone, never half-used.
  touch "$PREFIX/.complete"
  echo "Slurm 25.11.2 built: configure $((t1 - t0)) s, make $((t2 - t1)) s, install $((t3 - t2)) s" >&2
else
  echo "Slurm 25.11.2 already built at $PREFIX" >&2
fi
mkdir -p .venv
echo "$PREFIX" > .venv/slurm2511-prefix
if [ "${WITH_PYSLURM:-1}" = "1" ] && [ -x .venv/bin/python ]; then
  # pyslurm records the path of the libslurmfull it was built against: rebuild it when
  # that prefix changes (a new tarball), not only when it is missing
  if [ "$(cat .venv/slurm2511-pyslurm-prefix 2>/dev/null)" != "$PREFIX" ] \
    || ! .venv/bin/python -c "import importlib.metadata as m; assert m.version('pyslurm').startswith('25.11')" 2>/dev/null; then
    t4=$(date +%s)
    echo "building pyslurm 25.11.2 against $PREFIX" >&2
    SLURM_INCLUDE_DIR="$PREFIX/include" SLURM_LIB_DIR="$PREFIX/lib" \
      .venv/bin/pip install -q --disable-pip-version-check --no-cache-dir --force-reinstall \
      --no-deps --no-binary pyslurm pyslurm==25.11.2 \
      2>&1 | { grep -v "is ignored: it is neither" || true; }
    test "${PIPESTATUS[0]}" -eq 0 || { echo "building pyslurm 25.11.2 failed" >&2; exit 1; }
    echo "$PREFIX" > .venv/slurm2511-pyslurm-prefix
    echo "pyslurm built in $(( $(date +%s) - t4 )) s" >&2
  fi
fi
