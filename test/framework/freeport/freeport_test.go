package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctBindableAndOutsideTheEphemeralRange(t *testing.T) {
	ports, err := Ports(8)
	if err != nil {
		t.Fatal(err)
	}
	outside := map[int]bool{}
	for _, p := range outsideEphemeral() {
		outside[p] = true
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d chosen twice in %v", p, ports)
		}
		seen[p] = true
		if len(outside) > 0 && !outside[p] {
			t.Errorf("port %d is in the kernel's ephemeral range", p)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d not bindable after Ports returned: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}
