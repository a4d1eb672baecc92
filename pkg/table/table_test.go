package table

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// base is a whole second; received is when the tests' rows arrive.
var (
	base     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	received = base.Add(500 * time.Millisecond)
)

// ts formats base+d as metav1.Time does in JSON.
func ts(d time.Duration) string { return base.Add(d).UTC().Format(time.RFC3339) }

// micro formats base+d as metav1.MicroTime does in JSON.
func micro(d time.Duration) string {
	return base.Add(d).UTC().Format("2006-01-02T15:04:05.000000Z07:00")
}

// jsonCell is the JSON of a string cell as the apiserver writes it.
func jsonCell(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// ago is HumanDuration's cell for the duration from t to now.
func ago(t string, now time.Time) string {
	parsed, err := time.Parse(time.RFC3339Nano, t)
	if err != nil {
		panic(err)
	}
	return duration.HumanDuration(now.Sub(parsed))
}

// makeRow is a row as the apiserver writes it.
func makeRow(cells []string, object string) string {
	return `{"cells":[` + strings.Join(cells, ",") + `],"object":` + object + `}`
}

// partial is the PartialObjectMetadata of metadata in meta.k8s.io/gv.
func partial(gv, metadata string) string {
	return `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/` + gv + `","metadata":` + metadata + `}`
}

func TestAppendHumanDuration(t *testing.T) {
	var ds []time.Duration
	for _, s := range []int64{0, 1, 59, 60, 119, 120, 121, 599, 600, 601, 10799, 10800, 10860,
		28799, 28800, 172799, 172800, 176400, 691199, 691200, 63071999, 63072000, 63158400,
		252287999, 252288000, 315360000} {
		for _, frac := range []time.Duration{0, time.Microsecond, 999999 * time.Microsecond} {
			ds = append(ds, time.Duration(s)*time.Second+frac, -time.Duration(s)*time.Second-frac)
		}
	}
	ds = append(ds, 1<<63-1, -1<<63)
	for _, d := range ds {
		want := strings.NewReplacer("<", `\u003c`, ">", `\u003e`).Replace(duration.HumanDuration(d))
		if got := string(appendHumanDuration(nil, d)); got != want {
			t.Errorf("appendHumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func FuzzAppendHumanDuration(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(-2 * time.Second))
	f.Add(int64(7*24*time.Hour + 59*time.Minute))
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		want := strings.NewReplacer("<", `\u003c`, ">", `\u003e`).Replace(duration.HumanDuration(d))
		if got := string(appendHumanDuration(nil, d)); got != want {
			t.Errorf("appendHumanDuration(%v) = %q, want %q", d, got, want)
		}
	})
}

func TestFor(t *testing.T) {
	tests := []struct {
		name   string
		minor  int
		gr     schema.GroupResource
		ok     bool
		object bool
		age    int
	}{
		{name: "pods", minor: 37, gr: gr("", "pods"), ok: true, object: true, age: 4},
		{name: "jobs", minor: 31, gr: gr("batch", "jobs"), ok: true, object: true, age: 4},
		{name: "cronjobs", minor: 34, gr: gr("batch", "cronjobs"), ok: true, object: true, age: 6},
		{name: "events", minor: 33, gr: gr("", "events"), ok: true, object: true, age: -1},
		{name: "events.k8s.io events", minor: 33, gr: gr("events.k8s.io", "events"), ok: true, object: true, age: -1},
		{name: "configmaps", minor: 36, gr: gr("", "configmaps"), ok: true, age: 2},
		{name: "resourcequotas 1.32", minor: 32, gr: gr("", "resourcequotas"), ok: true, age: 1},
		{name: "resourcequotas 1.33", minor: 33, gr: gr("", "resourcequotas"), ok: true, age: 3},
		{name: "serviceaccounts 1.34", minor: 34, gr: gr("", "serviceaccounts"), ok: true, age: 2},
		{name: "serviceaccounts 1.35", minor: 35, gr: gr("", "serviceaccounts"), ok: true, age: 1},
		{name: "roles", minor: 37, gr: gr("rbac.authorization.k8s.io", "roles"), ok: true, age: -1},
		{name: "storageclasses 1.36", minor: 36, gr: gr("storage.k8s.io", "storageclasses"), ok: true, age: 5},
		{name: "storageclasses 1.37", minor: 37, gr: gr("storage.k8s.io", "storageclasses")},
		{name: "flowschemas", minor: 31, gr: gr("flowcontrol.apiserver.k8s.io", "flowschemas")},
		{name: "evictions", minor: 37, gr: gr("", "evictions")},
		{name: "devicetaintrules", minor: 37, gr: gr("resource.k8s.io", "devicetaintrules")},
		{name: "mutatingadmissionpolicies 1.31", minor: 31, gr: gr("admissionregistration.k8s.io", "mutatingadmissionpolicies")},
		{name: "unknown resource", minor: 37, gr: gr("example.com", "widgets")},
		{name: "release 1.30", minor: 30, gr: gr("", "pods")},
		{name: "release 1.38", minor: 38, gr: gr("", "pods")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := For(tc.minor, tc.gr)
			if ok != tc.ok {
				t.Fatalf("For(%d, %v) ok = %v, want %v", tc.minor, tc.gr, ok, tc.ok)
			}
			if !ok {
				return
			}
			if r.Object != tc.object || r.age != tc.age {
				t.Errorf("For(%d, %v) = Object %v, age %d; want %v, %d", tc.minor, tc.gr, r.Object, r.age, tc.object, tc.age)
			}
		})
	}
}

func TestForCustom(t *testing.T) {
	tests := []struct {
		name    string
		columns []Column
		ok      bool
		dates   []int
	}{
		{name: "default Age", dates: []int{1}, ok: true},
		{name: "no date column", columns: []Column{{Type: "string", JSONPath: ".spec.x"}}, ok: true},
		{name: "creationTimestamp after others", columns: []Column{
			{Type: "string", JSONPath: ".spec.x"}, {Type: "integer", JSONPath: ".spec.n"},
			{Type: "date", JSONPath: ".metadata.creationTimestamp"},
		}, ok: true, dates: []int{3}},
		{name: "date of the status", columns: []Column{
			{Type: "date", JSONPath: ".metadata.creationTimestamp"}, {Type: "date", JSONPath: ".status.lastSeen"},
		}},
		{name: "deletionTimestamp", columns: []Column{{Type: "date", JSONPath: ".metadata.deletionTimestamp"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := ForCustom(tc.columns)
			if ok != tc.ok {
				t.Fatalf("ForCustom ok = %v, want %v", ok, tc.ok)
			}
			var dates []int
			for i := range 64 {
				if r.dates&(1<<i) != 0 {
					dates = append(dates, i)
				}
			}
			if diff := cmp.Diff(tc.dates, dates); ok && diff != "" {
				t.Errorf("date cells (-want +got):\n%s", diff)
			}
			if r.Object {
				t.Errorf("ForCustom asks for an Object feed")
			}
		})
	}
}

// rowCase is one row of one resource, its cells as the apiserver renders
// them at received given as functions of the instant.
type rowCase struct {
	name   string
	rules  Rules
	object string
	// cells renders the cells for instant now.
	cells func(now time.Time) []string
	// meta is the object's metadata, as its PartialObjectMetadata holds it.
	meta string
}

func mustFor(minor int, g schema.GroupResource) Rules {
	r, ok := For(minor, g)
	if !ok {
		panic(fmt.Sprintf("no rules for %v", g))
	}
	return r
}

func mustForCustom(columns []Column) Rules {
	r, ok := ForCustom(columns)
	if !ok {
		panic("no rules")
	}
	return r
}

const podMeta = `{"name":"p","namespace":"ns","uid":"u","resourceVersion":"7","creationTimestamp":"` + "%s" + `","labels":{"a":"\u003cb\u003e"}}`

func podObject(meta, spec, status string) string {
	return `{"kind":"Pod","apiVersion":"v1","metadata":` + meta + `,"spec":` + spec + `,"status":` + status + `}`
}

func rowCases() []rowCase {
	pods := mustFor(37, gr("", "pods"))
	created := ts(-90 * time.Minute)
	pmeta := fmt.Sprintf(podMeta, created)
	finished1, finished2, finished3 := ts(-70*time.Second), ts(-50*time.Minute), ts(-3*time.Second)
	term := func(at string) string { return `{"terminated":{"exitCode":1,"finishedAt":"` + at + `"}}` }
	podCells := func(restarts func(now time.Time) string) func(now time.Time) []string {
		return func(now time.Time) []string {
			return []string{`"p"`, `"1/1"`, `"Running"`, jsonCell(restarts(now)), jsonCell(ago(created, now)), `"10.0.0.1"`, `"n"`, `"\u003cnone\u003e"`, `"\u003cnone\u003e"`}
		}
	}
	restarts := func(n int, at string) func(now time.Time) string {
		return func(now time.Time) string { return fmt.Sprintf("%d (%s ago)", n, ago(at, now)) }
	}
	fixed := func(s string) func(time.Time) string { return func(time.Time) string { return s } }
	always := `"restartPolicy":"Always"`
	initSpec := `{"initContainers":[{"name":"i1"},{"name":"s1",` + always + `}],"containers":[{"name":"c"}]}`

	jobs := mustFor(37, gr("batch", "jobs"))
	jmeta := `{"name":"j","namespace":"ns","creationTimestamp":"` + created + `"}`
	start := ts(-150 * time.Second)
	jobCells := func(d func(now time.Time) string) func(now time.Time) []string {
		return func(now time.Time) []string {
			return []string{`"j"`, `"Running"`, `"0/1"`, jsonCell(d(now)), jsonCell(ago(created, now)), `"c"`, `"i"`, `"x=y"`}
		}
	}

	cron := mustFor(31, gr("batch", "cronjobs"))
	cmeta := `{"name":"c","namespace":"ns","creationTimestamp":"` + created + `"}`
	cronCells := func(last func(now time.Time) string) func(now time.Time) []string {
		return func(now time.Time) []string {
			return []string{`"c"`, `"* * * * *"`, `"\u003cnone\u003e"`, `"False"`, `0`, jsonCell(last(now)), jsonCell(ago(created, now)), `"c"`, `"i"`, `"\u003cnone\u003e"`}
		}
	}

	events := mustFor(37, gr("", "events"))
	eventsV1 := mustFor(37, gr("events.k8s.io", "events"))
	emeta := `{"name":"e","namespace":"ns","resourceVersion":"9"}`
	eventCells := func(last, first func(now time.Time) string) func(now time.Time) []string {
		return func(now time.Time) []string {
			return []string{jsonCell(last(now)), `"Normal"`, `"Pulled"`, `"pod/p"`, `""`, `"kubelet, n"`, `"m"`, jsonCell(first(now)), `1`, `"e"`}
		}
	}
	evMicro := micro(-(61*time.Second + 400*time.Millisecond + 17*time.Microsecond))
	seriesAt := micro(-(2*time.Second + 700*time.Millisecond))

	cms := mustFor(37, gr("", "configmaps"))
	cmMeta := func(c string) string { return `{"name":"cm","namespace":"ns","creationTimestamp":` + c + `}` }

	return []rowCase{
		{
			name: "pod without restarts", rules: pods, meta: pmeta,
			object: podObject(pmeta, `{"containers":[{"name":"c"}]}`, `{"containerStatuses":[{"name":"c","restartCount":0}]}`),
			cells:  podCells(fixed("0")),
		},
		{
			name: "pod restarted, no finish time", rules: pods, meta: pmeta,
			object: podObject(pmeta, `{"containers":[{"name":"c"}]}`, `{"containerStatuses":[{"name":"c","restartCount":2,"lastState":{}}]}`),
			cells:  podCells(fixed("2")),
		},
		{
			name: "pod regular containers: sum and latest", rules: pods, meta: pmeta,
			object: podObject(pmeta, `{"containers":[{"name":"c"},{"name":"d"}]}`,
				`{"containerStatuses":[{"name":"c","restartCount":2,"lastState":`+term(finished1)+`},{"name":"d","restartCount":1,"lastState":`+term(finished2)+`}]}`),
			cells: podCells(restarts(3, finished1)),
		},
		{
			name: "pod initialized: restartable init containers count, others do not", rules: pods, meta: pmeta,
			object: podObject(pmeta, initSpec,
				`{"initContainerStatuses":[`+
					`{"name":"i1","restartCount":4,"state":{"terminated":{"exitCode":0}},"lastState":`+term(finished3)+`},`+
					`{"name":"s1","restartCount":1,"started":true,"lastState":`+term(finished2)+`}],`+
					`"containerStatuses":[{"name":"c","restartCount":2}]}`),
			cells: podCells(restarts(3, finished2)),
		},
		{
			name: "pod initializing: the init containers read count", rules: pods, meta: pmeta,
			object: podObject(pmeta, initSpec,
				`{"conditions":[{"type":"Initialized","status":"False"}],"initContainerStatuses":[`+
					`{"name":"i1","restartCount":4,"state":{"waiting":{"reason":"CrashLoopBackOff"}},"lastState":`+term(finished3)+`},`+
					`{"name":"s1","restartCount":1,"lastState":`+term(finished2)+`}],`+
					`"containerStatuses":[{"name":"c","restartCount":2,"lastState":`+term(finished1)+`}]}`),
			cells: podCells(restarts(4, finished3)),
		},
		{
			name: "pod initializing but Initialized: restartable ones read so far and regular", rules: pods, meta: pmeta,
			object: podObject(pmeta, `{"initContainers":[{"name":"s1",`+always+`},{"name":"i1"},{"name":"s2",`+always+`}],"containers":[{"name":"c"}]}`,
				`{"conditions":[{"type":"Initialized","status":"True"}],"initContainerStatuses":[`+
					`{"name":"s1","restartCount":1,"started":true,"lastState":`+term(finished2)+`},`+
					`{"name":"i1","restartCount":4,"state":{"running":{}},"lastState":`+term(finished3)+`},`+
					`{"name":"s2","restartCount":8,"started":true,"lastState":`+term(finished3)+`}],`+
					`"containerStatuses":[{"name":"c","restartCount":2,"lastState":`+term(finished1)+`}]}`),
			cells: podCells(restarts(3, finished1)),
		},
		{
			name: "pod created at the zero time", rules: pods, meta: `{"name":"p","creationTimestamp":null}`,
			object: podObject(`{"name":"p","creationTimestamp":null}`, `{}`, `{}`),
			cells: func(now time.Time) []string {
				return []string{`"p"`, `"0/0"`, `""`, `"0"`, `"\u003cunknown\u003e"`, `""`, `""`, `"\u003cnone\u003e"`, `"\u003cnone\u003e"`}
			},
		},
		{
			name: "job running", rules: jobs, meta: jmeta,
			object: `{"kind":"Job","apiVersion":"batch/v1","metadata":` + jmeta + `,"status":{"startTime":"` + start + `"}}`,
			cells:  jobCells(func(now time.Time) string { return ago(start, now) }),
		},
		{
			name: "job complete", rules: jobs, meta: jmeta,
			object: `{"kind":"Job","apiVersion":"batch/v1","metadata":` + jmeta + `,"status":{"startTime":"` + start + `","completionTime":"` + ts(-5*time.Second) + `"}}`,
			cells:  jobCells(fixed("2m25s")),
		},
		{
			name: "job not started", rules: jobs, meta: jmeta,
			object: `{"kind":"Job","apiVersion":"batch/v1","metadata":` + jmeta + `,"status":{}}`,
			cells:  jobCells(fixed("")),
		},
		{
			name: "cronjob never scheduled", rules: cron, meta: cmeta,
			object: `{"kind":"CronJob","apiVersion":"batch/v1","metadata":` + cmeta + `,"status":{}}`,
			cells:  cronCells(fixed("<none>")),
		},
		{
			name: "cronjob scheduled", rules: cron, meta: cmeta,
			object: `{"kind":"CronJob","apiVersion":"batch/v1","metadata":` + cmeta + `,"status":{"lastScheduleTime":"` + ts(-4*time.Second) + `"}}`,
			cells:  cronCells(func(now time.Time) string { return ago(ts(-4*time.Second), now) }),
		},
		{
			name: "core event with legacy timestamps", rules: events, meta: emeta,
			object: `{"kind":"Event","apiVersion":"v1","metadata":` + emeta + `,"firstTimestamp":"` + ts(-3*time.Hour) + `","lastTimestamp":"` + ts(-9*time.Second) + `","eventTime":null}`,
			cells: eventCells(func(now time.Time) string { return ago(ts(-9*time.Second), now) },
				func(now time.Time) string { return ago(ts(-3*time.Hour), now) }),
		},
		{
			name: "core event with an event time only", rules: events, meta: emeta,
			object: `{"kind":"Event","apiVersion":"v1","metadata":` + emeta + `,"firstTimestamp":null,"lastTimestamp":null,"eventTime":"` + evMicro + `"}`,
			cells: eventCells(func(now time.Time) string { return ago(evMicro, now) },
				func(now time.Time) string { return ago(evMicro, now) }),
		},
		{
			name: "core event with a series", rules: events, meta: emeta,
			object: `{"kind":"Event","apiVersion":"v1","metadata":` + emeta + `,"firstTimestamp":null,"lastTimestamp":"` + ts(-time.Second) + `","eventTime":"` + evMicro + `","series":{"count":2,"lastObservedTime":"` + seriesAt + `"}}`,
			cells: eventCells(func(now time.Time) string { return ago(seriesAt, now) },
				func(now time.Time) string { return ago(evMicro, now) }),
		},
		{
			name: "core event without times", rules: events, meta: emeta,
			object: `{"kind":"Event","apiVersion":"v1","metadata":` + emeta + `,"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,"series":{"count":2}}`,
			cells:  eventCells(fixed("<unknown>"), fixed("<unknown>")),
		},
		{
			name: "events.k8s.io event", rules: eventsV1, meta: emeta,
			object: `{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":` + emeta + `,"eventTime":"` + evMicro + `","series":{"count":2,"lastObservedTime":"` + seriesAt + `"},"deprecatedFirstTimestamp":"` + ts(-2*time.Hour) + `","deprecatedLastTimestamp":"` + ts(-time.Hour) + `"}`,
			cells: eventCells(func(now time.Time) string { return ago(seriesAt, now) },
				func(now time.Time) string { return ago(ts(-2*time.Hour), now) }),
		},
		{
			name: "events.k8s.io event without series", rules: eventsV1, meta: emeta,
			object: `{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":` + emeta + `,"eventTime":"` + evMicro + `","deprecatedLastTimestamp":"` + ts(-time.Hour) + `"}`,
			cells: eventCells(func(now time.Time) string { return ago(ts(-time.Hour), now) },
				func(now time.Time) string { return ago(evMicro, now) }),
		},
		{
			name: "configmap", rules: cms, meta: cmMeta(`"` + created + `"`),
			object: partial("v1", cmMeta(`"`+created+`"`)),
			cells: func(now time.Time) []string {
				return []string{`"cm"`, `3`, jsonCell(ago(created, now))}
			},
		},
		{
			name: "configmap without creationTimestamp", rules: cms, meta: cmMeta("null"),
			object: partial("v1", cmMeta("null")),
			cells:  func(now time.Time) []string { return []string{`"cm"`, `3`, `"\u003cunknown\u003e"`} },
		},
		{
			name: "role: no clock cell", rules: mustFor(31, gr("rbac.authorization.k8s.io", "roles")), meta: cmMeta(`"` + created + `"`),
			object: partial("v1", cmMeta(`"`+created+`"`)),
			cells:  func(now time.Time) []string { return []string{`"cm"`, jsonCell(created)} },
		},
		{
			name: "custom resource with default columns", rules: mustForCustom(nil), meta: cmMeta(`"` + created + `"`),
			object: partial("v1", cmMeta(`"`+created+`"`)),
			cells:  func(now time.Time) []string { return []string{`"cm"`, jsonCell(ago(created, now))} },
		},
		{
			name:   "custom resource with a date column among others",
			rules:  mustForCustom([]Column{{Type: "string", JSONPath: ".spec.a"}, {Type: "date", JSONPath: ".metadata.creationTimestamp"}, {Type: "integer", JSONPath: ".spec.n"}}),
			meta:   cmMeta(`"` + created + `"`),
			object: partial("v1", cmMeta(`"`+created+`"`)),
			cells: func(now time.Time) []string {
				return []string{`"cm"`, `"\u003cx\u003e"`, jsonCell(ago(created, now)), `null`}
			},
		},
	}
}

func TestParseAppend(t *testing.T) {
	instants := []time.Duration{0, 400 * time.Millisecond, 2 * time.Second, 70 * time.Second, 26 * time.Hour, 3 * 365 * 24 * time.Hour}
	for _, tc := range rowCases() {
		t.Run(tc.name, func(t *testing.T) {
			// The apiserver rendered the row up to 5s before it arrived,
			// by a clock up to MaxClockSkew behind listproxy's.
			for _, rendered := range []time.Time{received, received.Add(-4 * time.Second), received.Add(-window - MaxClockSkew + 10*time.Millisecond)} {
				raw := makeRow(tc.cells(rendered), tc.object)
				stored, object, row, err := tc.rules.Parse([]byte(raw), received)
				if err != nil {
					t.Fatalf("Parse(%s): %v", raw, err)
				}
				if diff := cmp.Diff(tc.object, string(object)); diff != "" {
					t.Errorf("object (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(partial("v1", tc.meta), string(row.Object(stored))); diff != "" {
					t.Errorf("Object (-want +got):\n%s", diff)
				}
				for _, d := range instants {
					now := received.Add(d)
					for _, gv := range []string{"v1", "v1beta1"} {
						got := string(row.Append([]byte("prefix,"), stored, now, IncludeMetadata, gv))
						want := "prefix," + makeRow(tc.cells(now), partial(gv, tc.meta))
						if diff := cmp.Diff(want, got); diff != "" {
							t.Errorf("Append(now %v, Metadata, %s) (-want +got):\n%s", d, gv, diff)
						}
					}
					got := string(row.Append(nil, stored, now, IncludeNone, "v1"))
					if diff := cmp.Diff(makeRow(tc.cells(now), "null"), got); diff != "" {
						t.Errorf("Append(now %v, None) (-want +got):\n%s", d, diff)
					}
				}
			}
		})
	}
}

// TestAppendHeadTail: a row's head and tail are its rendering split after
// its last clock cell; the blank head has the head's layout with every
// byte of each clock cell blanked, and ClockLens gives those cells'
// lengths.
func TestAppendHeadTail(t *testing.T) {
	const blank = 0xff
	instants := []time.Duration{0, 9 * time.Second, 70 * time.Second, 26 * time.Hour, 3 * 365 * 24 * time.Hour}
	for _, tc := range rowCases() {
		t.Run(tc.name, func(t *testing.T) {
			raw := makeRow(tc.cells(received), tc.object)
			stored, _, row, err := tc.rules.Parse([]byte(raw), received)
			if err != nil {
				t.Fatalf("Parse(%s): %v", raw, err)
			}
			for _, d := range instants {
				now := received.Add(d)
				head := row.AppendHead([]byte("prefix,"), stored, now)
				got := string(row.AppendTail(head, stored, IncludeMetadata, "v1beta1"))
				if diff := cmp.Diff(string(row.Append([]byte("prefix,"), stored, now, IncludeMetadata, "v1beta1")), got); diff != "" {
					t.Errorf("AppendHead + AppendTail at %v (-Append +got):\n%s", d, diff)
				}
				tail := string(row.AppendTail(nil, stored, IncludeNone, "v1"))
				if !strings.HasSuffix(tail, `"object":null}`) || strings.Contains(tail, `"cells":[`) && len(row.slots) > 0 {
					t.Errorf("AppendTail at %v = %s: want the row after its clock cells", d, tail)
				}
				blanked := row.AppendHeadBlank([]byte("prefix,"), stored, now, blank)
				if len(blanked) != len(head) {
					t.Fatalf("AppendHeadBlank at %v is %d bytes, AppendHead %d", d, len(blanked), len(head))
				}
				// The blanked bytes, run by run, are the clock cells.
				var runs []int
				for k := range blanked {
					switch {
					case blanked[k] == head[k]:
					case blanked[k] != blank:
						t.Fatalf("AppendHeadBlank at %v: byte %d is %q, want %q or blank", d, k, blanked[k], head[k])
					case k > 0 && blanked[k-1] == blank:
						runs[len(runs)-1]++
					default:
						runs = append(runs, 1)
					}
				}
				var want uint64
				for k, n := range runs {
					want |= uint64(n) << (8 * k)
				}
				lens, ok := row.ClockLens(now)
				if !ok || lens != want {
					t.Errorf("ClockLens at %v = %#x, %v; want %#x (blanked runs %v)", d, lens, ok, want, runs)
				}
				if len(runs) != len(row.slots) {
					t.Errorf("AppendHeadBlank at %v blanked %d runs, want %d clock cells", d, len(runs), len(row.slots))
				}
			}
		})
	}
}

// TestClockLensTooMany: a row of more clock cells than ClockLens tells
// apart has no lengths.
func TestClockLensTooMany(t *testing.T) {
	for _, n := range []int{MaxClockLens, MaxClockLens + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			row := &Row{slots: make([]slot, n)}
			if _, ok := row.ClockLens(received); ok != (n <= MaxClockLens) {
				t.Errorf("ClockLens of %d clock cells: ok = %v", n, ok)
			}
		})
	}
}

func TestParseMismatch(t *testing.T) {
	for _, tc := range rowCases() {
		t.Run(tc.name, func(t *testing.T) {
			cells := tc.cells(received)
			for i := range cells {
				for _, wrong := range []string{`"1h"`, `"\u003cunknown\u003e"`, `"7 (3s ago)"`, `null`} {
					if wrong == cells[i] {
						continue
					}
					changed := append([]string(nil), cells...)
					changed[i] = wrong
					raw := makeRow(changed, tc.object)
					_, _, _, err := tc.rules.Parse([]byte(raw), received)
					// Only cells the rules read may be found out.
					if err != nil && !errors.Is(err, ErrMismatch) {
						t.Errorf("Parse(%s) = %v, want nil or ErrMismatch", raw, err)
					}
				}
			}
			// Rendered too long before it was received, or after, by
			// more than the clock skew tolerated: within a minute of it
			// ErrClockSkew, further ErrMismatch.
			for _, tt := range []struct {
				rendered time.Time
				want     error
			}{
				{received.Add(-window - MaxClockSkew - 2*time.Second), ErrClockSkew},
				{received.Add(MaxClockSkew + 2*time.Second), ErrClockSkew},
				{received.Add(-3 * time.Minute), ErrMismatch},
				{received.Add(3 * time.Minute), ErrMismatch},
			} {
				raw := makeRow(tc.cells(tt.rendered), tc.object)
				if inTolerance(tc, raw) {
					continue
				}
				if _, _, _, err := tc.rules.Parse([]byte(raw), received); !errors.Is(err, tt.want) {
					t.Errorf("Parse of a row rendered at %v: %v, want %v", tt.rendered.Sub(received), err, tt.want)
				}
			}
		})
	}
}

// inTolerance: raw is the row of tc rendered at some instant in
// [received-5s-MaxClockSkew, received+MaxClockSkew].
func inTolerance(tc rowCase, raw string) bool {
	for t := received.Add(-window - MaxClockSkew); !t.After(received.Add(MaxClockSkew)); t = t.Add(10 * time.Millisecond) {
		if makeRow(tc.cells(t), tc.object) == raw {
			return true
		}
	}
	return false
}

func TestParseFindsTheClockCells(t *testing.T) {
	// A wrong value in a clock cell is a mismatch, whichever it is.
	tests := []struct {
		name  string
		rules Rules
		cell  int
	}{
		{name: "pod Restarts", rules: mustFor(37, gr("", "pods")), cell: 3},
		{name: "pod Age", rules: mustFor(37, gr("", "pods")), cell: 4},
		{name: "job Duration", rules: mustFor(37, gr("batch", "jobs")), cell: 3},
		{name: "event Last Seen", rules: mustFor(37, gr("", "events")), cell: 0},
		{name: "event First Seen", rules: mustFor(37, gr("", "events")), cell: 7},
		{name: "custom date", rules: mustForCustom(nil), cell: 1},
	}
	cases := rowCases()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for _, rc := range cases {
				if rc.rules.kind != tc.rules.kind || rc.rules.dates != tc.rules.dates {
					continue
				}
				cells := rc.cells(received)
				if tc.cell >= len(cells) {
					continue
				}
				cells[tc.cell] = `"41d"`
				_, _, _, err := rc.rules.Parse([]byte(makeRow(cells, rc.object)), received)
				if !errors.Is(err, ErrMismatch) {
					t.Errorf("%s: Parse with cell %d changed = %v, want ErrMismatch", rc.name, tc.cell, err)
				}
				n++
			}
			if n == 0 {
				t.Fatal("no row case for these rules")
			}
		})
	}
}

func TestParseBadRows(t *testing.T) {
	rules := mustFor(37, gr("", "configmaps"))
	meta := partial("v1", `{"name":"a","creationTimestamp":null}`)
	tests := []struct {
		name string
		raw  string
	}{
		{name: "empty", raw: ``},
		{name: "not a row", raw: `{"object":null}`},
		{name: "unterminated cells", raw: `{"cells":["a",`},
		{name: "no object", raw: `{"cells":["a",1,"\u003cunknown\u003e"]}`},
		{name: "trailing bytes", raw: `{"cells":["a",1,"\u003cunknown\u003e"],"object":` + meta + `}x`},
		{name: "object of another kind", raw: `{"cells":["a",1,"\u003cunknown\u003e"],"object":{"kind":"ConfigMap"}}`},
		{name: "object in v1beta1", raw: `{"cells":["a",1,"\u003cunknown\u003e"],"object":` + partial("v1beta1", `{"name":"a"}`) + `}`},
		{name: "too few cells", raw: `{"cells":["a",1],"object":` + meta + `}`},
		{name: "unterminated string", raw: `{"cells":["a\"],"object":` + meta + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, err := rules.Parse([]byte(tc.raw), received); err == nil {
				t.Errorf("Parse(%s) succeeded", tc.raw)
			}
		})
	}
}

func TestAppendAllocates(t *testing.T) {
	for _, tc := range rowCases() {
		raw := makeRow(tc.cells(received), tc.object)
		stored, _, row, err := tc.rules.Parse([]byte(raw), received)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		dst := make([]byte, 0, 4096)
		now := received.Add(time.Hour)
		if n := testing.AllocsPerRun(100, func() {
			dst = row.Append(dst[:0], stored, now, IncludeMetadata, "v1beta1")
		}); n != 0 {
			t.Errorf("%s: Append allocates %v times", tc.name, n)
		}
	}
}

// aheadSkews are how far ahead of listproxy's clock the tests' apiservers
// render rows: NTP-synced hosts differ by milliseconds; MaxClockSkew is
// the most tolerated.
var aheadSkews = []time.Duration{time.Millisecond, 3 * time.Millisecond, 30 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond, MaxClockSkew}

// TestParseClockAhead: a row rendered by an apiserver whose clock is a
// little ahead of listproxy's is accepted. Received shortly before a
// whole second, such a row's cells of whole-second times read the next
// second: a time after its arrival by listproxy's clock. ahead is at
// most the skew, and more than 0 for a cell of seconds that crossed. The
// stored row is rendered on listproxy's clock: as its apiserver renders
// it for the same instant of its own clock.
func TestParseClockAhead(t *testing.T) {
	instants := []time.Duration{0, 700 * time.Millisecond, 9 * time.Second, 26 * time.Hour}
	for _, skew := range aheadSkews {
		at := base.Add(time.Second - skew/2)
		for _, tc := range rowCases() {
			raw := makeRow(tc.cells(at.Add(skew)), tc.object)
			stored, _, row, ahead, err := tc.rules.ParseAhead([]byte(raw), at)
			if err != nil {
				t.Errorf("%v ahead: %s: Parse(%s): %v", skew, tc.name, raw, err)
				continue
			}
			if ahead < 0 || ahead > skew {
				t.Errorf("%v ahead: %s: ahead %v, want within [0, %v]", skew, tc.name, ahead, skew)
			}
			// The job's Duration is of seconds, from a whole second.
			if tc.name == "job running" && ahead <= 0 {
				t.Errorf("%v ahead: %s: ahead %v, want more than 0", skew, tc.name, ahead)
			}
			for _, d := range instants {
				now := at.Add(d)
				if got, want := string(row.Append(nil, stored, now, IncludeNone, "v1")), makeRow(tc.cells(now), "null"); got != want {
					t.Errorf("%v ahead: %s: Append(now %v) (-want +got):\n%s", skew, tc.name, d, cmp.Diff(want, got))
				}
			}
		}
	}
}

// TestParseAheadNone: a row rendered up to 5s before it arrived, by a
// clock equal to listproxy's, shows no skew.
func TestParseAheadNone(t *testing.T) {
	for _, tc := range rowCases() {
		for _, rendered := range []time.Time{received, received.Add(-4 * time.Second)} {
			_, _, _, ahead, err := tc.rules.ParseAhead([]byte(makeRow(tc.cells(rendered), tc.object)), received)
			if err != nil || ahead != 0 {
				t.Errorf("%s rendered %v before: ahead %v, %v; want 0, nil", tc.name, received.Sub(rendered), ahead, err)
			}
		}
	}
}

// TestParseClockSkewBeyond: a clock cell that follows its rule only for an
// instant beyond the tolerance, within a minute of it, is ErrClockSkew (an
// ErrMismatch); further, or not a duration the rule can give, it is
// ErrMismatch alone.
func TestParseClockSkewBeyond(t *testing.T) {
	var job rowCase
	for _, tc := range rowCases() {
		if tc.name == "job running" {
			job = tc
		}
	}
	for _, tt := range []struct {
		name     string
		rendered time.Time
		skew     bool
	}{
		{"ahead beyond the tolerance", received.Add(MaxClockSkew + time.Second), true},
		{"ahead by a minute", received.Add(MaxClockSkew + skewSearch), true},
		{"behind beyond the tolerance", received.Add(-window - MaxClockSkew - 1100*time.Millisecond), true},
		{"ahead by 2 minutes", received.Add(MaxClockSkew + 2*time.Minute), false},
		{"behind by 2 minutes", received.Add(-window - MaxClockSkew - 2*time.Minute), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw := makeRow(job.cells(tt.rendered), job.object)
			_, _, _, err := job.rules.Parse([]byte(raw), received)
			if !errors.Is(err, ErrMismatch) || errors.Is(err, ErrClockSkew) != tt.skew {
				t.Errorf("Parse(%s) = %v; want ErrMismatch, ErrClockSkew %v", raw, err, tt.skew)
			}
		})
	}
}
