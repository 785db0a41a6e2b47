#!/usr/bin/env bash
# What `make test` needs besides the Python packages: the IRC adapter's tests start a real ngircd
# (on free loopback ports, never 6667) and make its TLS certificate with the openssl CLI; the
# clock-step tests build a small LD_PRELOAD library with a C compiler. Missing ones are installed
# with apt-get when this user may (root, or password-less sudo); otherwise the command to run is
# printed and those tests fail with the same advice.
set -u
need=()
command -v ngircd >/dev/null 2>&1 || [ -x /usr/sbin/ngircd ] || need+=(ngircd)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || need+=(gcc libc6-dev)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "make test: the IRC adapter and clock-step tests need ${need[*]}: sudo apt-get install -y ${need[*]}" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make test: the IRC adapter and clock-step tests need ${need[*]}; install them with your package manager" >&2
  exit 0
fi
echo "make test: installing ${need[*]} (for the IRC adapter and clock-step tests)"
if ! { "${sudo[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need[@]}"; } >/dev/null; then
  echo "make test: apt-get could not install ${need[*]}" >&2
fi
# The Debian package starts its own ngircd on port 6667: not wanted, the tests start theirs.
{ "${sudo[@]}" systemctl disable --now ngircd || "${sudo[@]}" service ngircd stop; } >/dev/null 2>&1 || true
exit 0
