//go:build linux

package netns_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/netns"
)

// helperVar makes the test binary a tiny network tool, run inside a
// host's namespace: "listen" echoes a line back on :7000 until killed;
// "dial ADDR" prints "ok" when ADDR's echo answers within a second, else
// the error.
const helperVar = "TROUPE_NETNS_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperVar) {
	case "listen":
		l, err := net.Listen("tcp", ":7000")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(line))
			}()
		}
	case "dial":
		fmt.Println(dial(os.Args[len(os.Args)-1]))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func dial(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return err.Error()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err.Error()
	}
	if line != "hi\n" {
		return fmt.Sprintf("echo answered %q", line)
	}
	return "ok"
}

// Need returns a Net of the named hosts, or skips (fails, when RequireVar
// is 1) on a machine that cannot build one.
func need(t *testing.T, names ...string) *netns.Net {
	t.Helper()
	if err := netns.Available(); err != nil {
		if os.Getenv(netns.RequireVar) == "1" {
			t.Fatalf("%v (%s=1 requires it)", err, netns.RequireVar)
		}
		t.Skipf("%v (%s=1 makes this a failure)", err, netns.RequireVar)
	}
	n, err := netns.New(context.Background(), names...)
	require.NoError(t, err)
	t.Cleanup(n.Close)
	return n
}

// TestPartitionCutsAndHeals: hosts talk over the switch; a partition
// cuts exactly the links between its groups, both ways, and Heal restores
// them.
func TestPartitionCutsAndHeals(t *testing.T) {
	n := need(t, "a", "b", "c")
	ctx := context.Background()
	for _, h := range []string{"a", "b", "c"} {
		cmd := n.Command(h, os.Args[0])
		cmd.Env = append(os.Environ(), helperVar+"=listen")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
	}
	reach := func(from, to string) string {
		cmd := n.Command(from, os.Args[0], n.Host(to).Addr.String()+":7000")
		cmd.Env = append(os.Environ(), helperVar+"=dial")
		out, err := cmd.Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	assert.Equal(t, "ok", reach("a", "b"))
	assert.Equal(t, "ok", reach("c", "a"))

	require.NoError(t, n.Partition(ctx, []string{"a"}, []string{"b", "c"}))
	assert.Contains(t, reach("a", "b"), "timeout", "a is cut from b, silently")
	assert.Contains(t, reach("c", "a"), "timeout", "and c from a")
	assert.Equal(t, "ok", reach("b", "c"), "b and c, on one side, still talk")

	// The test process itself can go on a host, as a and as c.
	inA := func() error {
		c, err := net.Dial("tcp", n.Host("b").Addr.String()+":7000")
		if err == nil {
			c.Close()
		}
		return err
	}
	require.Error(t, n.Do("a", func() error {
		c, err := net.DialTimeout("tcp", n.Host("b").Addr.String()+":7000", 300*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err
	}), "a cannot reach b")
	require.NoError(t, n.Do("c", inA), "c can")

	require.NoError(t, n.Degrade(ctx, 0, 100))
	assert.Contains(t, reach("b", "c"), "timeout", "100% loss drops everything")

	require.NoError(t, n.Heal(ctx))
	assert.Equal(t, "ok", reach("a", "b"))
	assert.Equal(t, "ok", reach("c", "a"))
}

// TestBadInput: host names and partitions that name unknown hosts are
// refused by name.
func TestBadInput(t *testing.T) {
	n := need(t, "a")
	_, err := netns.New(context.Background(), "a", "a")
	assert.ErrorContains(t, err, `host name "a"`)
	_, err = netns.New(context.Background(), "Bad-Name")
	assert.ErrorContains(t, err, `host name "Bad-Name"`)
	assert.ErrorContains(t, n.Partition(context.Background(), []string{"a"}, []string{"z"}), `host "z"`)
	assert.ErrorContains(t, n.Degrade(context.Background(), 0, 101), "loss 101%")
	if !n.CanDelay() {
		assert.True(t, errors.Is(n.Degrade(context.Background(), time.Millisecond, 0), netns.ErrNoNetem))
	}
}
