//go:build linux

// Package netns builds a small network of hosts on one Linux machine for
// tests that need real network faults: each host is a network namespace
// with one veth link to a bridge in a switch namespace of its own, and a
// nemesis in that switch partitions hosts from each other (nftables drop
// rules on the bridge, silent as a cut cable), drops a share of all
// packets, and delays them (tc netem on the switch's ports, where the
// kernel has it).
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN: ip netns add mounts),
// and ip (iproute2) and nft (nftables) on PATH. Available says what is
// missing; tests skip with its reason unless RequireVar is 1.
//
// Nothing here touches the machine's own network: the bridge, the links
// and the addresses live in the namespaces, whose names carry the test
// process's pid, and Close removes them.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// RequireVar names the variable that, set to 1, turns a machine where the
// network cannot be built into a test failure instead of a skip.
const RequireVar = "TROUPE_REQUIRE_NETNS"

// ErrUnavailable: this machine cannot build namespaced networks (not
// root, no ip or nft command, namespaces refused). Available wraps it with
// the reason.
var ErrUnavailable = errors.New("netns: network namespaces are not available")

// ErrNoNetem: the kernel has no netem queueing discipline
// (CONFIG_NET_SCH_NETEM), so links cannot be delayed.
var ErrNoNetem = errors.New("netns: the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so links cannot be delayed")

// subnet is the hosts' network: the same in every Net, since each lives
// in namespaces of its own.
var subnet = netip.MustParsePrefix("10.77.0.0/24")

var hostNameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,9}$`)

// Available reports whether this process can build a Net, and if not,
// why, wrapping ErrUnavailable.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (uid %d); ip netns add and nft need CAP_NET_ADMIN and CAP_SYS_ADMIN", ErrUnavailable, os.Geteuid())
	}
	for _, cmd := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(cmd); err != nil {
			pkg := map[string]string{"ip": "iproute2", "nft": "nftables"}[cmd]
			return fmt.Errorf("%w: %s is not on PATH (Debian package %s)", ErrUnavailable, cmd, pkg)
		}
	}
	name := "troupe-probe-" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns add: %v: %s", ErrUnavailable, err, bytes.TrimSpace(out))
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("nft", "-n", "list", "tables").CombinedOutput(); err != nil {
		return fmt.Errorf("%w: nft: %v: %s", ErrUnavailable, err, bytes.TrimSpace(out))
	}
	return nil
}

// Net is a switch and the hosts plugged into it. Its nemesis methods
// replace the whole fault state at once: Partition, Degrade and Heal are
// each a complete description of what the network does now.
type Net struct {
	prefix string
	sw     string // the switch's namespace
	hosts  []*Host
	netem  bool

	mu        sync.Mutex
	partition [][]string
	lossPct   int
	delay     time.Duration
}

// Host is one machine of a Net.
type Host struct {
	Name string     // as given to New
	NS   string     // its network namespace
	Addr netip.Addr // its address on the switch
	port string     // its link's name in the switch namespace
}

// New builds a Net with one host per name (lower-case letters and
// digits, at most 10). Close removes it; ctx bounds the setup commands.
func New(ctx context.Context, names ...string) (*Net, error) {
	if len(names) == 0 || len(names) > 200 {
		return nil, fmt.Errorf("netns: %d hosts: want 1 to 200", len(names))
	}
	n := &Net{prefix: "troupe-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64()%1e6, 10)}
	n.sw = n.prefix + "-switch"
	seen := map[string]bool{}
	addr := subnet.Addr().Next()
	for i, name := range names {
		if !hostNameRE.MatchString(name) || seen[name] {
			return nil, fmt.Errorf("netns: host name %q: want a unique name of lower-case letters and digits, at most 10, starting with a letter", name)
		}
		seen[name] = true
		n.hosts = append(n.hosts, &Host{Name: name, NS: n.prefix + "-" + name, Addr: addr, port: "p" + strconv.Itoa(i)})
		addr = addr.Next()
	}
	if err := n.build(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Net) build(ctx context.Context) error {
	if err := run(ctx, "ip", "netns", "add", n.sw); err != nil {
		return err
	}
	sw := []string{"-n", n.sw}
	steps := [][]string{
		append(sw, "link", "set", "lo", "up"),
		append(sw, "link", "add", "br0", "type", "bridge"),
		append(sw, "link", "set", "br0", "up"),
	}
	for _, h := range n.hosts {
		if err := run(ctx, "ip", "netns", "add", h.NS); err != nil {
			return err
		}
		in := []string{"-n", h.NS}
		steps = append(steps,
			append(sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS),
			append(sw, "link", "set", h.port, "master", "br0"),
			append(sw, "link", "set", h.port, "up"),
			append(in, "link", "set", "lo", "up"),
			append(in, "addr", "add", netip.PrefixFrom(h.Addr, subnet.Bits()).String(), "dev", "eth0"),
			append(in, "link", "set", "eth0", "up"),
		)
	}
	for _, s := range steps {
		if err := run(ctx, "ip", s...); err != nil {
			return err
		}
	}
	// The nemesis's table: bridged IPv4 traffic passes its forward
	// chain, which apply rewrites.
	if err := n.nft(ctx, "add table bridge nemesis\nadd chain bridge nemesis forward { type filter hook forward priority 0; policy accept; }\n"); err != nil {
		return err
	}
	// netem is a module many kernels lack: learn whether Degrade can delay.
	n.netem = exec.CommandContext(ctx, "tc", "-n", n.sw, "qdisc", "add", "dev", n.hosts[0].port, "root", "netem", "delay", "0ms").Run() == nil
	if n.netem {
		return run(ctx, "tc", "-n", n.sw, "qdisc", "del", "dev", n.hosts[0].port, "root")
	}
	return nil
}

// Host returns the host called name, or nil.
func (n *Net) Host(name string) *Host {
	for _, h := range n.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// CanDelay reports whether Degrade can delay packets (the kernel has
// netem).
func (n *Net) CanDelay() bool { return n.netem }

// Command returns a command that runs bin in host's namespace. Its
// process is bin itself (ip netns exec execs it), so signals reach it.
func (n *Net) Command(host string, bin string, args ...string) *exec.Cmd {
	h := n.Host(host)
	if h == nil {
		panic("netns: no host " + host)
	}
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, bin}, args...)...)
}

// Do runs f on an OS thread of its own that has entered host's network
// namespace: the sockets f opens (a connection it dials) belong to the
// host for their whole life, whichever goroutine uses them afterwards.
// Sockets opened later by other goroutines (a client's reconnection) do
// not; f's caller is not moved.
func (n *Net) Do(host string, f func() error) error {
	h := n.Host(host)
	if h == nil {
		return fmt.Errorf("netns: no host %q", host)
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it ends with the goroutine, so
		// that no other goroutine ever runs in the host's namespace.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netns: opening %s: %w", h.NS, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: entering %s: %w", h.NS, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Partition cuts the network into groups of host names: packets between
// hosts of different groups are dropped silently (a host left out of
// every group keeps talking to everyone). It replaces any earlier
// partition and keeps the loss and delay.
func (n *Net) Partition(ctx context.Context, groups ...[]string) error {
	for _, g := range groups {
		for _, name := range g {
			if n.Host(name) == nil {
				return fmt.Errorf("netns: partition names host %q, which this network lacks", name)
			}
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.partition = groups
	return n.apply(ctx)
}

// Degrade drops lossPct percent of the packets the switch forwards
// (each direction on its own) and delays every packet by delay on its way
// out of the switch. A delay needs netem (ErrNoNetem without it). It keeps
// the partition.
func (n *Net) Degrade(ctx context.Context, delay time.Duration, lossPct int) error {
	if lossPct < 0 || lossPct > 100 {
		return fmt.Errorf("netns: loss %d%%: want 0 to 100", lossPct)
	}
	if delay < 0 {
		return fmt.Errorf("netns: delay %v is negative", delay)
	}
	if delay > 0 && !n.netem {
		return ErrNoNetem
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.netem && delay != n.delay {
		for _, h := range n.hosts {
			_ = exec.CommandContext(ctx, "tc", "-n", n.sw, "qdisc", "del", "dev", h.port, "root").Run()
			if delay > 0 {
				if err := run(ctx, "tc", "-n", n.sw, "qdisc", "add", "dev", h.port, "root", "netem", "delay", strconv.FormatInt(delay.Microseconds(), 10)+"us"); err != nil {
					return err
				}
			}
		}
	}
	n.delay, n.lossPct = delay, lossPct
	return n.apply(ctx)
}

// Heal removes every fault: partition, loss and delay.
func (n *Net) Heal(ctx context.Context) error {
	if err := n.Degrade(ctx, 0, 0); err != nil {
		return err
	}
	return n.Partition(ctx)
}

// apply rewrites the nemesis chain from the fault state, in one nft
// transaction, so that no packet sees half a rule set.
func (n *Net) apply(ctx context.Context) error {
	var b strings.Builder
	b.WriteString("flush chain bridge nemesis forward\n")
	group := map[string]int{}
	for i, g := range n.partition {
		for _, name := range g {
			group[name] = i
		}
	}
	for _, a := range n.hosts {
		for _, c := range n.hosts {
			ga, okA := group[a.Name]
			gc, okC := group[c.Name]
			if okA && okC && ga != gc {
				fmt.Fprintf(&b, "add rule bridge nemesis forward ip saddr %s ip daddr %s drop\n", a.Addr, c.Addr)
			}
		}
	}
	switch {
	case n.lossPct == 100:
		b.WriteString("add rule bridge nemesis forward meta protocol ip drop\n")
	case n.lossPct > 0:
		fmt.Fprintf(&b, "add rule bridge nemesis forward meta protocol ip numgen random mod 100 < %d drop\n", n.lossPct)
	}
	return n.nft(ctx, b.String())
}

func (n *Net) nft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.sw, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: nft in %s: %w: %s\n%s", n.sw, err, bytes.TrimSpace(out), script)
	}
	return nil
}

// Close removes the namespaces (and with them the links and rules).
// Processes still running in them keep their namespace, cut off.
func (n *Net) Close() {
	for _, ns := range slices.Concat([]string{n.sw}, hostNamespaces(n.hosts)) {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
}

func hostNamespaces(hs []*Host) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.NS)
	}
	return out
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
