#!/usr/bin/env bash
# bench/fill-page-cache.sh DIR: fills the machine's free memory with the page cache of one
# file, DIR/page-cache-fill, and prints what it did to stderr.
#
# A broker that has run for a while has a full page cache: each new page of its logs is
# taken from pages it, or something else, read or wrote long ago. A benchmark on a machine
# whose memory is mostly free measures something else: every new page comes from free
# memory, and on a virtual machine that gives free memory back to its host (this one: a
# virtio balloon with free page reporting) the first touch of such a page is a fault in
# the host, several times the cost of the copy into it (docs/performance.md, "Page-cache
# window"). bench/sections.sh calls this before each section so that every broker and
# peer in it, whichever runs first, writes into a full page cache; the file's pages, the
# oldest and clean, are what the kernel reclaims first.
#
# The file is as large as the machine's memory (less if the disk is small: at most half
# of the space free when it is made) and written once; each call then reads it through,
# which brings back into the cache what was reclaimed from it, so a call after a section
# deleted its data (and freed that memory) fills it again without the file growing.
#
#   bench/fill-page-cache.sh DIR             make the file if needed, read it through
#   bench/fill-page-cache.sh --top-up DIR    the same, only if DIR/page-cache-fill exists
#                                            (what a section calls after deleting a
#                                            broker's data, before starting the next)
#   bench/fill-page-cache.sh --remove DIR    delete the file
set -euo pipefail
case "${1:-}" in
--remove) rm -f "$2/page-cache-fill"; exit 0 ;;
--top-up) [ -e "$2/page-cache-fill" ] || exit 0; shift ;;
esac
dir=${1:?usage: $0 [--remove|--top-up] DIR}
mkdir -p "$dir"
f="$dir/page-cache-fill"
memfree() { awk '/^MemFree:/ {print int($2 / 1024)}' /proc/meminfo; }
before=$(memfree) start=$(date +%s.%N)
if ! [ -e "$f" ]; then
	want=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
	disk=$(df -Pm "$dir" | awk 'NR == 2 {print int($4 / 2)}')
	if [ "$want" -gt "$disk" ]; then want=$disk; fi
	dd if=/dev/zero of="$f" bs=1M count="$want" conv=fsync status=none
fi
size=$(($(stat -c %s "$f") >> 20))
cat "$f" >/dev/null
echo "fill-page-cache: $f ($size MiB) read through in $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s; MiB free before $before, after $(memfree)" >&2
