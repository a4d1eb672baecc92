package table

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// capture is one resource's rows as a real apiserver wrote them
// (testdata/rows-1.<minor>.json, written by the e2e test
// TestTableRowsFromAPIServer): fed, and with includeObject=Metadata in
// v1, with when each was requested and received.
type capture struct {
	Group    string    `json:"group"`
	Resource string    `json:"resource"`
	Feed     []string  `json:"feed"`
	FeedAt   time.Time `json:"feedAt"`
	Want     []string  `json:"want"`
	WantFrom time.Time `json:"wantFrom"`
	WantTo   time.Time `json:"wantTo"`
}

func TestCapturedRows(t *testing.T) {
	files, err := filepath.Glob("testdata/rows-1.*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captured rows: %v", err)
	}
	for _, file := range files {
		minor, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(file), "rows-1."), ".json"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var captures []capture
		if err := json.Unmarshal(b, &captures); err != nil {
			t.Fatal(err)
		}
		for _, c := range captures {
			gr := schema.GroupResource{Group: c.Group, Resource: c.Resource}
			t.Run(filepath.Base(file)+"/"+gr.String(), func(t *testing.T) {
				rules, ok := For(minor, gr)
				if !ok {
					t.Fatalf("For(%d, %v) is false", minor, gr)
				}
				for i, f := range c.Feed {
					feed := []byte(f)
					stored, object, row, err := rules.Parse(feed, c.FeedAt)
					if err != nil {
						t.Fatalf("Parse(%s): %v", feed, err)
					}
					if !strings.Contains(string(feed), string(object)) || object[0] != '{' {
						t.Errorf("object %s is not the row's", object)
					}
					from := row.Append(nil, stored, c.WantFrom, IncludeMetadata, "v1")
					to := row.Append(nil, stored, c.WantTo, IncludeMetadata, "v1")
					if string(from) != c.Want[i] && string(to) != c.Want[i] {
						t.Errorf("row %d (-apiserver +ours):\n%s", i, cmp.Diff(c.Want[i], string(to)))
					}
					// A day later every clock cell reads differently.
					if later := row.Append(nil, stored, c.WantTo.Add(24*time.Hour), IncludeMetadata, "v1"); len(row.slots) > 0 && string(later) == string(to) {
						t.Errorf("row %d does not change with the clock", i)
					}
					// Any clock cell changed is found out.
					for _, s := range row.slots {
						changed := append([]byte(nil), feed...)
						changed = append(changed[:s.start:s.start], append([]byte("41d"), feed[s.end:]...)...)
						if _, _, _, err := rules.Parse(changed, c.FeedAt); err == nil {
							t.Errorf("Parse of row %d with %q for %q succeeded", i, "41d", feed[s.start:s.end])
						}
					}
				}
			})
		}
	}
}
