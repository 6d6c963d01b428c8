#!/usr/bin/env bash
# Hugepages for the dpdk transport: reserves a number of 2 MiB or 1 GiB pages on each
# chosen NUMA node, makes sure a hugetlbfs of that size is mounted (at /dev/hugepages
# when nothing is), reads the counts back from the kernel and fails when it gave fewer
# than asked (putting the previous counts back), then shows what is reserved. --check
# only reports (any user); with --pages it also says whether the reservation is there.
# Used by deploy/sluice-broker-dpdk.service (ExecStartPre); docs/dpdk.md "Running on a
# real NIC" says how much to reserve and where.
#
#   dpdk-hugepages.sh --pages N [--size 2M|1G] [--node 0[,1...]] [--mount DIR] [--persist]
#   dpdk-hugepages.sh --check [--pages N] [--size 2M|1G] [--node 0[,1...]]
#
# N is the count on EACH node given (default: every node; a kernel without NUMA has one
# pool). --pages 0 releases them. The count is set exactly, like dpdk-hugepages.py: a
# larger reservation already there is lowered. The writes go through dpdk-hugepages.py
# (Debian package dpdk) when it is installed, else straight to sysfs; the read-back is
# always from sysfs. --persist also writes /etc/sysctl.d/80-sluice-hugepages.conf so the
# pages are reserved early at boot (default page size only; 1 GiB pages belong on the
# kernel command line: default_hugepagesz=1G hugepagesz=1G hugepages=N).
set -euo pipefail
shopt -s nullglob
PROG=dpdk-hugepages
SYS_NODES=/sys/devices/system/node
SYS_POOLS=/sys/kernel/mm/hugepages
SYSCTL_FILE=/etc/sysctl.d/80-sluice-hugepages.conf

die() { echo "$PROG: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

CHECK=0 PERSIST=0 PAGES='' SIZE=2M NODE_LIST='' MOUNT_DIR=''
while (( $# )); do
    case $1 in
        --check) CHECK=1 ;;
        --persist) PERSIST=1 ;;
        --pages) (( $# >= 2 )) || die "--pages needs a count"; PAGES=$2; shift ;;
        --size) (( $# >= 2 )) || die "--size needs 2M or 1G"; SIZE=$2; shift ;;
        --node) (( $# >= 2 )) || die "--node needs a node number or a list 0,1"; NODE_LIST=$2; shift ;;
        --mount) (( $# >= 2 )) || die "--mount needs a directory"; MOUNT_DIR=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (--help)" ;;
    esac
    shift
done
(( CHECK )) || [[ -n $PAGES ]] || die "say --pages N (or --check to only report; --help)"
[[ -z $PAGES || $PAGES =~ ^[0-9]{1,7}$ ]] || die "--pages $PAGES: expected a count of pages (0-9999999)"
(( CHECK && PERSIST )) && die "--check changes nothing; --persist cannot go with it"

case ${SIZE^^} in
    2M|2MB|2048K|2048KB) SIZE=2M KB=2048 ;;
    1G|1GB|1024M|1048576K|1048576KB) SIZE=1G KB=1048576 ;;
    *) die "--size $SIZE: expected 2M or 1G" ;;
esac
if [[ ! -d $SYS_POOLS/hugepages-${KB}kB ]]; then
    have=$(cd "$SYS_POOLS" 2>/dev/null && echo hugepages-* | sed 's/hugepages-//g')
    die "this kernel offers no $SIZE pages (it offers: ${have:-none}); 1G pages need a CPU with pdpe1gb"
fi
DEFAULT_KB=$(awk '/^Hugepagesize:/ {print $2}' /proc/meminfo)

# The pools to work on: "N" for NUMA node N, or "-" for the kernel's only pool.
pools=()
if [[ -d $SYS_NODES/node0 ]]; then
    if [[ -n $NODE_LIST ]]; then
        IFS=, read -r -a pools <<<"$NODE_LIST"
    else
        for d in "$SYS_NODES"/node[0-9]*; do pools+=("${d##*/node}"); done
        mapfile -t pools < <(printf '%s\n' "${pools[@]}" | sort -n)
    fi
    for n in "${pools[@]}"; do
        [[ $n =~ ^[0-9]{1,4}$ ]] || die "--node $NODE_LIST: expected node numbers separated by commas"
        [[ -d $SYS_NODES/node$n ]] || die "--node $n: no such NUMA node (here: $(cd $SYS_NODES && echo node[0-9]*))"
    done
else
    [[ -z $NODE_LIST || $NODE_LIST == 0 ]] || die "--node $NODE_LIST: this kernel has no NUMA nodes (only --node 0)"
    pools=(-)
fi
(( ${#pools[@]} )) || die "no NUMA node found under $SYS_NODES"

pool_dir() {  # $1: node or "-"; $2: page size in kB
    if [[ $1 == - ]]; then echo "$SYS_POOLS/hugepages-$2kB"; else echo "$SYS_NODES/node$1/hugepages/hugepages-$2kB"; fi
}
pool_name() { if [[ $1 == - ]]; then echo "the kernel's pool"; else echo "node $1"; fi; }

# The first hugetlbfs mount serving pages of $1 (2M or 1G), or nothing. The kernel shows
# every hugetlbfs mount's page size among its options (pagesize=2M).
mount_of() {
    awk -v want="pagesize=$1" '$3 == "hugetlbfs" {
        n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == want) { print $2; exit } }' /proc/mounts
}

report() {
    echo "hugepages (reserved and free, per node):"
    local n dir line
    for n in "${pools[@]}"; do
        line="  $(pool_name "$n"):"
        dir=$(pool_dir "$n" 2048)
        [[ -d $dir ]] && line+=" 2M $(<"$dir/nr_hugepages") reserved, $(<"$dir/free_hugepages") free;"
        dir=$(pool_dir "$n" 1048576)
        [[ -d $dir ]] && line+=" 1G $(<"$dir/nr_hugepages") reserved, $(<"$dir/free_hugepages") free;"
        echo "${line%;}"
    done
    local m2 m1 persisted=
    m2=$(mount_of 2M) m1=$(mount_of 1G)
    echo "  hugetlbfs: 2M pages ${m2:+at }${m2:-not mounted}; 1G pages ${m1:+at }${m1:-not mounted}"
    [[ -f $SYSCTL_FILE ]] && persisted=" ($SYSCTL_FILE: $(grep -v '^#' "$SYSCTL_FILE" | tr -s '\n' ' '))"
    echo "  default page size $(( DEFAULT_KB / 1024 )) MiB; vm.nr_hugepages=$(</proc/sys/vm/nr_hugepages)$persisted"
}

if (( CHECK )); then
    report
    [[ -n $PAGES ]] || exit 0
    short=0
    for n in "${pools[@]}"; do
        got=$(<"$(pool_dir "$n" "$KB")/nr_hugepages")
        if (( got < PAGES )); then
            echo "$PROG: $(pool_name "$n") has $got $SIZE pages reserved, fewer than $PAGES" >&2
            short=1
        fi
    done
    [[ -n $(mount_of "$SIZE") ]] || { echo "$PROG: no hugetlbfs mounted for $SIZE pages" >&2; short=1; }
    (( short == 0 )) || exit 1
    echo "$PROG: $PAGES $SIZE pages reserved on each of: ${pools[*]}; mounted at $(mount_of "$SIZE")"
    exit 0
fi

[[ $(id -u) -eq 0 ]] || die "needs root to reserve hugepages and mount hugetlbfs (--check only reports, as any user)"

# What --persist can write is checked before anything changes.
if (( PERSIST )); then
    (( KB == DEFAULT_KB )) || die "--persist: vm.nr_hugepages counts only the default page size" \
        "($(( DEFAULT_KB / 1024 )) MiB);" \
        "for $SIZE pages put 'hugepagesz=$SIZE hugepages=$(( PAGES * ${#pools[@]} ))' on the kernel command line," \
        "or let the systemd unit reserve them at each start (its ExecStartPre)"
    all=("$SYS_NODES"/node[0-9]*)
    [[ ${pools[0]} == - || ${#pools[@]} -eq ${#all[@]} ]] ||
        die "--persist: the sysctl spreads pages over every node;" \
        "it cannot hold a count for some nodes only: let the systemd unit reserve them at each start instead"
fi

# Set one pool to a count: through dpdk-hugepages.py when installed, else sysfs. Neither is
# trusted: the caller reads the count back.
set_pool() {  # $1: node or "-"; $2: pages
    local out
    if command -v dpdk-hugepages.py >/dev/null; then
        local node_arg=()
        [[ $1 == - ]] || node_arg=(--node "$1")
        out=$(dpdk-hugepages.py --pagesize "$SIZE" "${node_arg[@]}" --reserve "$(( $2 * KB ))K" 2>&1) ||
            echo "$PROG: dpdk-hugepages.py: $out" >&2
    else
        echo "$2" >"$(pool_dir "$1" "$KB")/nr_hugepages" || true
    fi
}

declare -A before=()
for n in "${pools[@]}"; do before[$n]=$(<"$(pool_dir "$n" "$KB")/nr_hugepages"); done
failed=
for n in "${pools[@]}"; do
    set_pool "$n" "$PAGES"
    got=$(<"$(pool_dir "$n" "$KB")/nr_hugepages")
    if (( got != PAGES )); then
        failed="$(pool_name "$n"): asked for $PAGES $SIZE pages, the kernel gave $got"
        break
    fi
done
if [[ -n $failed ]]; then
    for n in "${pools[@]}"; do set_pool "$n" "${before[$n]}"; done
    restored=
    for n in "${pools[@]}"; do restored+=" $(pool_name "$n")=$(<"$(pool_dir "$n" "$KB")/nr_hugepages")"; done
    echo "$PROG: $failed; the previous counts are back:$restored" >&2
    echo "  Free memory on that node is too little or too fragmented. Stop what holds memory, or" >&2
    echo "  compact it (echo 1 > /proc/sys/vm/compact_memory) and try again; reserving at boot" >&2
    echo "  (--persist, or hugepages=N on the kernel command line) finds it before it fragments." >&2
    exit 1
fi

if [[ -z $(mount_of "$SIZE") ]] && (( PAGES > 0 )); then
    dir=$MOUNT_DIR
    if [[ -z $dir ]]; then
        dir=/dev/hugepages
        mountpoint -q "$dir" 2>/dev/null && dir=/dev/hugepages-$SIZE
    fi
    mkdir -p "$dir"
    mount -t hugetlbfs -o "pagesize=$SIZE" nodev "$dir" || die "cannot mount hugetlbfs (pagesize=$SIZE) at $dir"
    echo "$PROG: mounted hugetlbfs for $SIZE pages at $dir"
fi

if (( PERSIST )); then
    total=$(( PAGES * ${#pools[@]} ))
    mkdir -p "${SYSCTL_FILE%/*}"
    printf '# Written by sluice deploy/dpdk-hugepages.sh --persist: %s pages of %s for the dpdk transport.\n' \
        "$total" "$SIZE" >"$SYSCTL_FILE.tmp"
    printf 'vm.nr_hugepages = %s\n' "$total" >>"$SYSCTL_FILE.tmp"
    mv "$SYSCTL_FILE.tmp" "$SYSCTL_FILE"
    echo "$PROG: wrote $SYSCTL_FILE (vm.nr_hugepages = $total, spread by the kernel over the nodes at boot)"
fi
report
