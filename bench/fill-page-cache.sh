#!/usr/bin/env bash
# bench/fill-page-cache.sh DIR: fills the machine's free memory with the page
# cache of one file, DIR/page-cache-fill (written, then synced so its pages are
# clean), and prints what it did to stderr.
#
# A broker that has run for a while has a full page cache: each new page of its
# logs is taken from pages it, or something else, read or wrote long ago. A
# benchmark on a machine whose memory is mostly free measures something else: every
# new page comes from free memory, and on a virtual machine that gives free memory
# back to its host (this one: a virtio balloon with free page reporting) the first
# touch of such a page is a fault in the host, several times the cost of the copy
# into it (docs/performance.md, "Page-cache window"). bench/sections.sh calls this
# before each section so that every broker and peer in it, whichever runs first,
# writes into a full page cache; the file's pages, the oldest and clean, are what
# the kernel reclaims first.
#
# Tops up: run again, it appends only what memory has been freed since (a section
# that deletes its data frees its pages). Bounded by the disk: it never lets the
# file take more than half of what is free on DIR's filesystem.
#
#   bench/fill-page-cache.sh DIR             fill (or top up)
#   bench/fill-page-cache.sh --top-up DIR    top up only if DIR/page-cache-fill exists
#                                            (what a section calls after deleting a
#                                            broker's data, before starting the next)
#   bench/fill-page-cache.sh --remove DIR    delete the file
#
# Environment: KEEL_BENCH_FILL_HEADROOM_MIB (memory left free, default 768).
set -euo pipefail
case "${1:-}" in
--remove) rm -f "$2/page-cache-fill"; exit 0 ;;
--top-up) [ -e "$2/page-cache-fill" ] || exit 0; shift ;;
esac
dir=${1:?usage: $0 [--remove] DIR}
mkdir -p "$dir"
f="$dir/page-cache-fill"
headroom=${KEEL_BENCH_FILL_HEADROOM_MIB:-768}
free_mib=$(awk '/^MemFree:/ {print int($2 / 1024)}' /proc/meminfo)
want=$((free_mib - headroom))
disk_mib=$(df -Pm "$dir" | awk 'NR == 2 {print int($4 / 2)}')
if [ "$want" -gt "$disk_mib" ]; then want=$disk_mib; fi
if [ "$want" -lt 64 ]; then
	echo "fill-page-cache: $free_mib MiB free, nothing to fill" >&2
	exit 0
fi
start=$(date +%s.%N)
dd if=/dev/zero of="$f" bs=1M count="$want" oflag=append conv=notrunc,fsync status=none
have=$(($(stat -c %s "$f") >> 20))
echo "fill-page-cache: $free_mib MiB were free; appended $want MiB to $f ($have MiB) in $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s; $(awk '/^MemFree:/ {print int($2 / 1024)}' /proc/meminfo) MiB free now" >&2
