package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// AuditEvents reads the apiserver's audit log: one event per request
// (stage ResponseComplete, or Panic), level Metadata, in the order written.
// The log backend is blocking, so an event is written before the request's
// handler returns, but a client may see the response a moment earlier: poll.
func (cp *ControlPlane) AuditEvents() ([]auditv1.Event, error) {
	f, err := os.Open(cp.AuditLogFile)
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	// Read-only: a Close error cannot lose data.
	defer func() { _ = f.Close() }()
	var events []auditv1.Event
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for scanner.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(scanner.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
		events = append(events, ev)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return events, nil
}
