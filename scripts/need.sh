#!/usr/bin/env bash
# Makes sure the Debian packages a make target uses are installed.
#
#   scripts/need.sh WHAT COMMAND:PACKAGE [COMMAND:PACKAGE ...]
#
# For each pair whose COMMAND is not on PATH, PACKAGE is wanted. The pseudo
# command `python3-venv` stands for "python3 can make a venv with pip"
# (Debian splits that into its own package); a COMMAND that is an absolute
# path stands for "this file exists". When something is wanted and
# apt-get can run (root, or sudo without a password), it installs it;
# otherwise it stops with one line naming the packages and the command to
# install them. WHAT names the target in that line.
set -euo pipefail
what=$1; shift
want=()
for pair in "$@"; do
  cmd=${pair%%:*} pkg=${pair#*:}
  case "$cmd" in
    python3-venv) python3 -c 'import venv, ensurepip' >/dev/null 2>&1 && continue ;;
    /*) [ -e "$cmd" ] && continue ;;
    *) command -v "$cmd" >/dev/null 2>&1 && continue ;;
  esac
  want+=("$pkg")
done
[ ${#want[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n)
else
  echo "make $what needs the Debian packages: ${want[*]}. Install them with: sudo apt-get install -y ${want[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make $what needs: ${want[*]} (no apt-get here: install them with your package manager)" >&2
  exit 1
fi
echo "make $what: installing ${want[*]} with apt-get" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
