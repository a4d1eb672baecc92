// Package freeport picks loopback TCP ports for servers that tests start as
// separate processes (etcd, kube-apiserver), which must be told their port
// before they bind it.
//
// Ports are drawn outside the kernel's ephemeral range. From that range the
// kernel hands out both the ports of listen(":0") and the local ports of
// outgoing connections, so a port found free there can be taken by any
// connection before the server binds it; with tests running in parallel
// that happens. Outside it, only another picker choosing the same port at
// random can collide.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Bounds of the ranges considered outside the ephemeral one.
const (
	lowest  = 10000 // below: well-known services people run on test machines
	highest = 65535
)

// Ports returns n distinct loopback ports that were free a moment ago.
func Ports(n int) ([]int, error) {
	candidates := outsideEphemeral()
	var ports []int
	var holds []net.Listener
	defer func() {
		for _, l := range holds {
			_ = l.Close() // only held to reserve the port
		}
	}()
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt == 100*n {
			return nil, fmt.Errorf("no free loopback port in %d attempts", attempt)
		}
		addr := "127.0.0.1:0" // the kernel's choice, when nothing is outside its range
		if len(candidates) > 0 {
			addr = "127.0.0.1:" + strconv.Itoa(candidates[rand.IntN(len(candidates))])
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		// Held until all are chosen, so that the ports differ.
		holds = append(holds, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// outsideEphemeral lists the ports in [lowest, highest] outside the range in
// /proc/sys/net/ipv4/ip_local_port_range (Linux's default 32768–60999 when
// it cannot be read).
func outsideEphemeral() []int {
	low, high := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, errL := strconv.Atoi(f[0])
			h, errH := strconv.Atoi(f[1])
			if errL == nil && errH == nil && l <= h {
				low, high = l, h
			}
		}
	}
	var ports []int
	for p := lowest; p <= highest; p++ {
		if p < low || p > high {
			ports = append(ports, p)
		}
	}
	return ports
}
