#!/bin/sh
# Where `make test` puts the suite's temporary files: prints a directory for TMPDIR, or
# nothing (the default temporary directory).
#
# The suite writes about 20,000 files a run (stores, histories, inner runs' trees; some
# tests write 64 MiB lines on purpose). On a disk mounted with `discard`, as CI's is, each
# unlink costs milliseconds: pytest's clean-up of an old run's directory took over a minute,
# serially, at the end of a run. A tmpfs (/dev/shm) makes writing, syncing and removing them
# nearly free, and with the "failed" retention policy a passing test's directory is removed
# when it ends, so the tmpfs holds a failed test's files only. Nothing changes when TMPDIR
# is already set (the user chose), or /dev/shm is no writable tmpfs with 4 GiB free.
if [ -n "${TMPDIR:-}" ]; then exit 0; fi
root=/dev/shm
grep -qs "^[^ ]* $root tmpfs " /proc/mounts || exit 0
[ -d "$root" ] && [ -w "$root" ] || exit 0
free_kib=$(df -Pk "$root" 2>/dev/null | awk 'NR == 2 { print $4 }')
[ "${free_kib:-0}" -ge 4194304 ] || exit 0
echo "$root"
