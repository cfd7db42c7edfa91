// Package edgetest attacks a troupe HTTP server's edge in tests.
package edgetest

import (
	"io"
	"net"
	"testing"
	"time"
)

// SlowBody is a slowloris client: it POSTs to path at addr a request that
// announces a 100 kB body and sends one byte of it, and returns what the
// server answers before it closes the connection. The test fails when the
// server has not closed it within 30 s, a bound far above any body
// deadline a test configures (it bounds the test, it measures nothing).
func SlowBody(t testing.TB, addr, path string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the server did not close the connection: %v (after %q)", err, answer)
	}
	return string(answer)
}
