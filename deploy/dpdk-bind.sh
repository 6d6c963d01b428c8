#!/usr/bin/env bash
# Hands a NIC to DPDK and back: binds a PCI network device (given by its address or its
# kernel interface name) to vfio-pci, after checking that it is not in use (an interface
# that is up, has addresses or routes, or belongs to a bridge or bond is refused unless
# --force: unbinding it would cut the machine off that network) and that vfio can use it
# (an IOMMU group, or vfio's unsafe no-IOMMU mode; what to change is printed otherwise).
# The driver it had is recorded under /run/sluice/dpdk-bind/ so --restore gives the
# device back to it. Binding a device already on vfio-pci changes nothing, so the script
# can run before every start (deploy/sluice-broker-dpdk.service does). NVIDIA/Mellanox
# NICs (mlx4/mlx5) are left alone: DPDK drives them beside their kernel driver.
#
#   dpdk-bind.sh [--force] DEVICE...             bind to vfio-pci (DEVICE: 0000:03:00.0, 03:00.0 or enp3s0f0)
#   dpdk-bind.sh [--force] --config FILE         bind every device that sluice.dpdk.eal.args in FILE
#                                                allows (-a/--allow ADDRESS[,devargs])
#   dpdk-bind.sh --restore [--to DRIVER] DEVICE...   back to the recorded kernel driver (or DRIVER)
#   dpdk-bind.sh --status                        every network device: driver, interface, NUMA node,
#                                                IOMMU group (dpdk-devbind.py --status-dev net first)
#
# The binding itself goes through dpdk-devbind.py (Debian package dpdk) when installed,
# else through sysfs (driver_override); either way the result is read back from sysfs.
# Root, except --status. --unbind is another name for --restore.
set -euo pipefail
shopt -s nullglob
PROG=dpdk-bind
STATE_DIR=/run/sluice/dpdk-bind
PCI=/sys/bus/pci
ADDR_RE='^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$'

die() { echo "$PROG: $*" >&2; exit 1; }
say() { echo "$PROG: $*"; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

MODE=bind FORCE=0 TO='' CONFIG=''
devices=()
while (( $# )); do
    case $1 in
        --status) MODE=status ;;
        --restore|--unbind) MODE=restore ;;
        --force) FORCE=1 ;;
        --to) (( $# >= 2 )) || die "--to needs a driver name"; TO=$2; shift ;;
        --config) (( $# >= 2 )) || die "--config needs a server.properties"; CONFIG=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option '$1' (--help)" ;;
        *) devices+=("$1") ;;
    esac
    shift
done

driver_of() {  # the driver a PCI device is bound to, or nothing
    if [[ -e $PCI/devices/$1/driver ]]; then basename "$(readlink -f "$PCI/devices/$1/driver")"; fi
}

ifaces_of() {  # the kernel network interfaces of a PCI device (a virtio NIC's sit one level below it)
    local n p
    for n in /sys/class/net/*; do
        [[ -e $n/device ]] || continue
        p=$(readlink -f "$n/device")
        if [[ $p == */$1 || $p == */$1/* ]]; then echo "${n##*/}"; fi
    done
}

# A device as the user named it -> its PCI address (0000:03:00.0).
pci_of() {
    local a=${1,,} p f
    if [[ $a =~ ^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]]; then
        [[ $a =~ $ADDR_RE ]] || a=0000:$a
        [[ -e $PCI/devices/$a ]] || die "$1: no PCI device $a here (dpdk-bind.sh --status lists the network devices)"
        echo "$a"
        return
    fi
    if [[ -e /sys/class/net/$1 ]]; then
        [[ -e /sys/class/net/$1/device ]] || die "$1: a virtual interface, not a PCI device"
        p=$(readlink -f "/sys/class/net/$1/device")
        while [[ $p == /sys/devices/* ]]; do
            if [[ ${p##*/} =~ $ADDR_RE && $(readlink -f "$p/subsystem") == */bus/pci ]]; then
                echo "${p##*/}"
                return
            fi
            p=${p%/*}
        done
        die "$1: not a PCI device (its device is $(readlink -f "/sys/class/net/$1/device"))"
    fi
    # An interface bound away from the kernel no longer exists: look for it among the records.
    for f in "$STATE_DIR"/*; do
        if grep -qx "iface=$1" "$f"; then echo "${f##*/}"; return; fi
    done
    die "$1: neither a PCI address (0000:03:00.0) nor a network interface here, nor one this script bound"
}

# Why an interface must not be taken from the kernel: printed, one reason a line; nothing if idle.
why_in_use() {
    local i=$1 flags addrs routes
    flags=$(<"/sys/class/net/$i/flags")
    if (( flags & 1 )); then echo "it is up"; fi
    addrs=$(ip -o addr show dev "$i" | awk '$4 !~ /^fe80:/ {print $4}' | tr '\n' ' ')
    if [[ -n $addrs ]]; then echo "it has the addresses ${addrs% }"; fi
    routes=$({ ip -4 route show dev "$i"; ip -6 route show dev "$i"; } 2>/dev/null |
        awk '$1 != "fe80::/64" && $1 != "multicast" {sub(/[[:space:]]+$/, ""); print}' | paste -sd ',' - |
        sed 's/,/, /g')
    if [[ -n $routes ]]; then echo "routes go through it: $routes"; fi
    if [[ -e /sys/class/net/$i/master ]]; then
        echo "it belongs to $(basename "$(readlink -f "/sys/class/net/$i/master")")"
    fi
}

iommu_explained() {
    cat >&2 <<EOF
$PROG: $1 has no IOMMU group: the IOMMU is off or absent, and vfio-pci needs one. Either
  - turn it on: VT-d (Intel) or AMD-Vi in the firmware, and on the kernel command line
    intel_iommu=on iommu=pt (Intel; on AMD iommu=pt), then reboot
    (/sys/kernel/iommu_groups/ then lists the groups); or
  - where there is no IOMMU (some virtual machines), allow vfio's unsafe no-IOMMU mode:
    the device can then write anywhere in memory and the kernel is tainted:
      echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode
    (at every boot: 'options vfio enable_unsafe_noiommu_mode=1' in /etc/modprobe.d/)
    and run this again. DPDK needs root then.
EOF
    exit 1
}

load_vfio() {
    [[ -d $PCI/drivers/vfio-pci ]] && return
    local out
    out=$(modprobe vfio-pci 2>&1) || die "cannot load vfio-pci (modprobe vfio-pci: ${out:-failed}); is this kernel's" \
        "module package installed (linux-image-*)?"
    [[ -d $PCI/drivers/vfio-pci ]] || die "modprobe vfio-pci succeeded but $PCI/drivers/vfio-pci is absent"
}

record() {  # $1 pci, $2 driver, $3 interfaces: kept until --restore (or a reboot empties /run)
    [[ -e $STATE_DIR/$1 ]] && return
    mkdir -p "$STATE_DIR"
    printf 'driver=%s\niface=%s\n' "$2" "$3" >"$STATE_DIR/$1.tmp"
    mv "$STATE_DIR/$1.tmp" "$STATE_DIR/$1"
}

# Move a device to a driver ("" = none), through dpdk-devbind.py when installed. Errors are
# judged by the caller from the driver read back; devbind itself exits 0 on most of them.
move_to() {  # $1 pci, $2 driver
    local dev=$PCI/devices/$1 force=()
    (( FORCE )) && force=(--force)
    if command -v dpdk-devbind.py >/dev/null; then
        if [[ -n $2 ]]; then
            dpdk-devbind.py --bind="$2" "${force[@]}" "$1" 2>&1 | { grep -v 'libkmod' || true; }
        else
            dpdk-devbind.py --unbind "${force[@]}" "$1" 2>&1 | { grep -v 'libkmod' || true; }
        fi
        return
    fi
    if [[ $2 == vfio-pci ]]; then echo vfio-pci >"$dev/driver_override"; fi
    if [[ -e $dev/driver ]]; then echo "$1" >"$dev/driver/unbind" || true; fi
    if [[ -n $2 ]]; then
        echo "$1" >"$PCI/drivers/$2/bind" 2>/dev/null || echo "$1" >"$PCI/drivers_probe" || true
    fi
    echo >"$dev/driver_override"  # an empty override lets any driver take it later
}

bind_one() {
    local pci=$1 dev=$PCI/devices/$1 cur ifs reasons group
    cur=$(driver_of "$pci")
    if [[ $cur == vfio-pci ]]; then say "$pci is already bound to vfio-pci"; return; fi
    case $cur in
        mlx4_core|mlx5_core)
            say "$pci is on $cur: NVIDIA/Mellanox NICs stay on their kernel driver, which DPDK's mlx driver works" \
                "beside (bifurcated); nothing to bind"
            return ;;
    esac
    [[ $(<"$dev/class") == 0x02* ]] || die "$pci is not a network device (PCI class $(<"$dev/class"))"
    ifs=$(ifaces_of "$pci" | paste -sd ' ' -)
    for i in $ifs; do
        reasons=$(why_in_use "$i" | paste -sd ';' - | sed 's/;/; /g')
        [[ -z $reasons ]] && continue
        if (( FORCE )); then
            echo "$PROG: $i ($pci) is in use ($reasons); binding it anyway (--force)" >&2
        else
            die "$i ($pci, driver ${cur:-none}) is in use: $reasons. Taking it from the kernel would cut this" \
                "machine off that network. Remove it from the network configuration (ifupdown, NetworkManager," \
                "systemd-networkd) and 'ip link set $i down' first, or pass --force."
        fi
    done
    load_vfio
    local noiommu
    noiommu=$(cat /sys/module/vfio/parameters/enable_unsafe_noiommu_mode 2>/dev/null || true)
    if [[ ! -e $dev/iommu_group && $noiommu != Y ]]; then iommu_explained "$pci"; fi
    record "$pci" "$cur" "$ifs"
    move_to "$pci" vfio-pci
    if [[ $(driver_of "$pci") != vfio-pci ]]; then
        echo "$PROG: binding $pci to vfio-pci failed: it is on '$(driver_of "$pci")'" >&2
        if [[ -n $cur && -z $(driver_of "$pci") ]]; then move_to "$pci" "$cur"; fi
        [[ -n $(driver_of "$pci") ]] && rm -f "$STATE_DIR/$pci"
        exit 1
    fi
    group=-
    [[ -e $dev/iommu_group ]] && group=$(basename "$(readlink -f "$dev/iommu_group")")
    say "$pci${ifs:+ ($ifs)} bound to vfio-pci (was ${cur:-unbound}); IOMMU group $group;" \
        "NUMA node $(<"$dev/numa_node") (reserve the hugepages there; -1: the machine has one)"
    for peer in "$dev"/iommu_group/devices/*; do
        peer=${peer##*/}
        [[ $peer == "$pci" ]] && continue
        case $(driver_of "$peer") in
            ''|vfio-pci|pcieport) ;;
            *) echo "$PROG: warning: $peer shares IOMMU group $group and is on $(driver_of "$peer"): DPDK cannot open" \
                "the group until it is bound to vfio-pci too or has no driver" >&2 ;;
        esac
    done
}

restore_one() {
    local pci=$1 orig cur
    cur=$(driver_of "$pci")
    if [[ -n $TO ]]; then
        orig=$TO
    elif [[ -e $STATE_DIR/$pci ]]; then
        orig=$(sed -n 's/^driver=//p' "$STATE_DIR/$pci")
    elif [[ -n $cur && $cur != vfio-pci ]]; then
        say "$pci is on $cur already: nothing to give back"
        return
    else
        die "$pci: no record of its kernel driver in $STATE_DIR (written when this script binds it; /run is" \
            "emptied at boot, when the kernel takes the device back anyway): say --to DRIVER (ixgbe, i40e, ice, ...)"
    fi
    if [[ $cur != "$orig" ]]; then
        if [[ -n $orig && ! -d $PCI/drivers/$orig ]]; then modprobe "$orig" || true; fi
        move_to "$pci" "$orig"
        cur=$(driver_of "$pci")
        [[ $cur == "$orig" ]] || die "giving $pci back to ${orig:-no driver} failed: it is on '${cur:-no driver}'"
    fi
    rm -f "$STATE_DIR/$pci"
    local ifs
    ifs=$(ifaces_of "$pci" | paste -sd ' ' -)
    say "$pci is on ${orig:-no driver}${ifs:+ (interface $ifs)}"
}

# The devices sluice.dpdk.eal.args allows, without their devargs: -a X, -aX, --allow X, --allow=X
# (and the older -w / --pci-whitelist).
config_devices() {
    local args t i v
    [[ -r $1 ]] || die "--config $1: cannot read it"
    args=$(sed -n 's/^[[:space:]]*sluice\.dpdk\.eal\.args[[:space:]]*=[[:space:]]*//p' "$1" | tail -n 1)
    local -a toks
    read -r -a toks <<<"$args"
    for (( i = 0; i < ${#toks[@]}; i++ )); do
        t=${toks[i]} v=''
        case $t in
            -a|-w|--allow|--pci-whitelist)
                (( i + 1 < ${#toks[@]} )) || die "--config $1: sluice.dpdk.eal.args ends with $t and no address"
                v=${toks[++i]} ;;
            --allow=*|--pci-whitelist=*) v=${t#*=} ;;
            -a?*|-w?*) v=${t:2} ;;
        esac
        if [[ -n $v ]]; then echo "${v%%,*}"; fi
    done
}

status() {
    if command -v dpdk-devbind.py >/dev/null; then
        { dpdk-devbind.py --status-dev net 2>&1 || echo "$PROG: dpdk-devbind.py --status-dev net failed"; } |
            { grep -v 'libkmod' || true; }
        echo
    fi
    echo "PCI network devices:"
    local d pci drv group node rec found=0
    for d in "$PCI"/devices/*; do
        [[ $(<"$d/class") == 0x02* ]] || continue
        found=1 pci=${d##*/} drv=$(driver_of "${d##*/}") group=- node=-
        [[ -e $d/iommu_group ]] && group=$(basename "$(readlink -f "$d/iommu_group")")
        [[ -r $d/numa_node ]] && node=$(<"$d/numa_node")
        rec=''
        if [[ -e $STATE_DIR/$pci ]]; then
            rec="; was on $(sed -n 's/^driver=//p' "$STATE_DIR/$pci") (restore: dpdk-bind.sh --restore $pci)"
        fi
        echo "  $pci driver=${drv:-none} if=$(ifaces_of "$pci" | paste -sd , -) numa_node=$node iommu_group=$group$rec"
    done
    (( found )) || echo "  none"
    local groups=(/sys/kernel/iommu_groups/*)
    echo "IOMMU groups: ${#groups[@]}$( (( ${#groups[@]} )) || echo ' (the IOMMU is off: see docs/dpdk.md)');" \
        "vfio-pci $([[ -d $PCI/drivers/vfio-pci ]] && echo loaded || echo 'not loaded');" \
        "vfio no-IOMMU mode: $(cat /sys/module/vfio/parameters/enable_unsafe_noiommu_mode 2>/dev/null || echo 'n/a')"
}

if [[ $MODE == status ]]; then
    if (( ${#devices[@]} )) || [[ -n $CONFIG ]]; then die "--status takes no device"; fi
    status
    exit 0
fi
[[ $(id -u) -eq 0 ]] || die "needs root to rebind PCI devices (--status works as any user)"
if [[ -n $CONFIG ]]; then
    listed=$(config_devices "$CONFIG")
    mapfile -t from_config <<<"$listed"
    [[ -n $listed ]] || from_config=()
    if (( ${#from_config[@]} == 0 )); then
        say "$CONFIG: sluice.dpdk.eal.args allows no PCI device (-a ADDRESS): nothing to bind"
        exit 0
    fi
    devices+=("${from_config[@]}")
fi
(( ${#devices[@]} )) || die "name a device (0000:03:00.0 or an interface name), or --config FILE, or --status (--help)"
[[ $MODE == restore || -z $TO ]] || die "--to goes with --restore"
pcis=()
for d in "${devices[@]}"; do pcis+=("$(pci_of "$d")"); done
for p in "${pcis[@]}"; do
    if [[ $MODE == bind ]]; then bind_one "$p"; else restore_one "$p"; fi
done
