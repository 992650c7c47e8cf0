# Sourced by scripts/test and scripts/serve (as root): apt-get that waits for another apt or dpkg process
# instead of failing in a second.
#
# apt takes fcntl locks (flock(1) on the same files does not block it). `-o DPkg::Lock::Timeout=N` makes
# apt-get install wait up to N s for /var/lib/dpkg/lock-frontend, but apt-get update takes
# /var/lib/apt/lists/lock and does not wait for it (apt 2.6: "Could not get lock /var/lib/apt/lists/lock"),
# so apt_update retries while that lock is held, for the same N s. N = $APT_LOCK_WAIT, default 600.
APT_LOCK_WAIT="${APT_LOCK_WAIT:-600}"

apt_update() {
    local deadline=$(( $(date +%s) + APT_LOCK_WAIT )) out said=0
    while true; do
        if out="$(apt-get update -qq -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" 2>&1)"; then
            [ -z "$out" ] || printf '%s\n' "$out" >&2
            return 0
        fi
        if grep -q "Could not get lock" <<<"$out" && [ "$(date +%s)" -lt "$deadline" ]; then
            [ "$said" = 1 ] || echo "apt: another apt or dpkg process holds its lock; waiting (up to ${APT_LOCK_WAIT} s)" >&2
            said=1
            sleep 5
            continue
        fi
        printf '%s\n' "$out" >&2
        return 1
    done
}

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" "$@" >/dev/null
}
