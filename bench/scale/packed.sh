#!/bin/bash
# Runs the scaling benchmark from the tarball `make bench-scale-pack` writes,
# on a machine without network or Go: static nova, graph-engine, sandbox,
# audit and nova-benchscale, and bubblewrap with its libraries for a machine
# that lacks it.
#
#   packed.sh TARBALL OUTDIR [benchscale flags...]
#
# It unpacks the tarball, installs bwrap from it when the machine has none
# (needs root), checks that bwrap can start Python, and runs nova-benchscale
# with the cores and production shapes (and the sandbox workers as before
# beside each cores shape), writing the table to OUTDIR/bench-scale.txt and
# CPU profiles to OUTDIR/profiles.
set -euo pipefail
tarball=$1 out=$2
shift 2
dir=$(mktemp -d /tmp/novascale.XXXX)
tar -xzf "$tarball" -C "$dir"
mkdir -p "$out"
echo "$(nproc) CPUs; kernel $(uname -r); $(/usr/bin/python3 --version 2>&1)" | tee "$out/machine.txt"
if ! command -v bwrap >/dev/null; then
	install -m 0755 "$dir/bwrap" /usr/local/bin/bwrap
	mkdir -p /usr/local/lib/novascale
	cp "$dir"/lib/* /usr/local/lib/novascale/
	echo /usr/local/lib/novascale >/etc/ld.so.conf.d/novascale.conf
	ldconfig
fi
bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
	--symlink usr/bin /bin --proc /proc --dev /dev /usr/bin/python3 -c 'print("bwrap starts python")'
"$dir/nova-benchscale" -bin "$dir" -tmp "$dir" -profile "$out/profiles" -before-workers 2 "$@" 2>"$out/stderr.txt" |
	tee "$out/bench-scale.txt"
