package table

import (
	"encoding/json"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// want is what the rule gives for one cell: either a fixed JSON value,
// or a string whose middle is the clock-relative duration since t.
type want struct {
	cell    int
	fixed   string // the whole JSON value when !clock
	clock   bool
	t       time.Time
	prefix  string // inside the string, before the duration
	suffix  string // inside the string, after the duration
	missing bool   // also accept null (a custom date column without value)
}

// since is the rule of the printers' translateTimestampSince: <unknown>
// for the zero time, else the duration since t.
func since(cell int, t time.Time) want {
	if t.IsZero() {
		return want{cell: cell, fixed: `"` + unknownJSON + `"`}
	}
	return want{cell: cell, clock: true, t: t}
}

// metaFields is what the rules read of metadata.
type metaFields struct {
	Metadata struct {
		CreationTimestamp metav1.Time `json:"creationTimestamp"`
	} `json:"metadata"`
}

// podFields is what the Restarts rule reads of a pod.
type podFields struct {
	metaFields
	Spec struct {
		InitContainers []struct {
			Name          string  `json:"name"`
			RestartPolicy *string `json:"restartPolicy"`
		} `json:"initContainers"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		InitContainerStatuses []containerStatus `json:"initContainerStatuses"`
		ContainerStatuses     []containerStatus `json:"containerStatuses"`
	} `json:"status"`
}

type containerStatus struct {
	Name         string `json:"name"`
	RestartCount int32  `json:"restartCount"`
	Started      *bool  `json:"started"`
	State        struct {
		Terminated *struct {
			ExitCode int32 `json:"exitCode"`
		} `json:"terminated"`
	} `json:"state"`
	LastState struct {
		Terminated *struct {
			FinishedAt metav1.Time `json:"finishedAt"`
		} `json:"terminated"`
	} `json:"lastState"`
}

// lastFinished is the container's lastState.terminated.finishedAt, zero
// when it has none.
func (c *containerStatus) lastFinished() time.Time {
	if c.LastState.Terminated == nil {
		return time.Time{}
	}
	return c.LastState.Terminated.FinishedAt.Time
}

// podRestarts is the pod printer's Restarts cell (3): the restarts of the
// containers that count and the last time one of them finished.
//
// Init container statuses are read in order up to the first that is
// neither terminated with exit code 0 nor a started restartable
// (restartPolicy Always) init container; reaching one means the pod is
// initializing. An initializing pod without the condition Initialized=True
// counts the init containers read; any other pod counts the restartable
// init containers read and every regular container.
func podRestarts(p *podFields) want {
	restartable := make(map[string]bool, len(p.Spec.InitContainers))
	for _, c := range p.Spec.InitContainers {
		restartable[c.Name] = c.RestartPolicy != nil && *c.RestartPolicy == "Always"
	}
	var initCount, sidecarCount int
	var initLast, sidecarLast time.Time
	initializing := false
	for i := range p.Status.InitContainerStatuses {
		c := &p.Status.InitContainerStatuses[i]
		initCount += int(c.RestartCount)
		initLast = later(initLast, c.lastFinished())
		if restartable[c.Name] {
			sidecarCount += int(c.RestartCount)
			sidecarLast = later(sidecarLast, c.lastFinished())
		}
		if c.State.Terminated != nil && c.State.Terminated.ExitCode == 0 {
			continue
		}
		if restartable[c.Name] && c.Started != nil && *c.Started {
			continue
		}
		initializing = true
		break
	}
	count, last := initCount, initLast
	if !initializing || initialized(p) {
		count, last = sidecarCount, sidecarLast
		for i := range p.Status.ContainerStatuses {
			c := &p.Status.ContainerStatuses[i]
			count += int(c.RestartCount)
			last = later(last, c.lastFinished())
		}
	}
	n := strconv.Itoa(count)
	if count == 0 || last.IsZero() {
		return want{cell: 3, fixed: `"` + n + `"`}
	}
	return want{cell: 3, clock: true, t: last, prefix: n + " (", suffix: " ago)"}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// initialized: the pod's first Initialized condition is True.
func initialized(p *podFields) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Initialized" {
			return c.Status == "True"
		}
	}
	return false
}

// jobFields is what the Duration rule reads of a job.
type jobFields struct {
	metaFields
	Status struct {
		StartTime      *metav1.Time `json:"startTime"`
		CompletionTime *metav1.Time `json:"completionTime"`
	} `json:"status"`
}

// jobDuration is the job printer's Duration cell (3): empty before the
// job starts, the time since its start while it runs, and its run time
// once it completes.
func jobDuration(j *jobFields) want {
	switch {
	case j.Status.StartTime == nil:
		return want{cell: 3, fixed: `""`}
	case j.Status.CompletionTime == nil:
		return want{cell: 3, clock: true, t: j.Status.StartTime.Time}
	}
	d := j.Status.CompletionTime.Sub(j.Status.StartTime.Time)
	return want{cell: 3, fixed: string(appendHumanDuration([]byte(`"`), d)) + `"`}
}

// cronJobFields is what the Last Schedule rule reads of a cronjob.
type cronJobFields struct {
	metaFields
	Status struct {
		LastScheduleTime *metav1.Time `json:"lastScheduleTime"`
	} `json:"status"`
}

// cronJobLastSchedule is the cronjob printer's Last Schedule cell (5).
func cronJobLastSchedule(c *cronJobFields) want {
	if c.Status.LastScheduleTime == nil {
		return want{cell: 5, fixed: `"` + noneJSON + `"`}
	}
	return since(5, c.Status.LastScheduleTime.Time)
}

// eventFields is what the Last Seen and First Seen rules read of an
// event, in both core/v1 and events.k8s.io/v1 (whose legacy timestamps
// are deprecatedFirstTimestamp and deprecatedLastTimestamp).
type eventFields struct {
	FirstTimestamp           metav1.Time      `json:"firstTimestamp"`
	LastTimestamp            metav1.Time      `json:"lastTimestamp"`
	DeprecatedFirstTimestamp metav1.Time      `json:"deprecatedFirstTimestamp"`
	DeprecatedLastTimestamp  metav1.Time      `json:"deprecatedLastTimestamp"`
	EventTime                metav1.MicroTime `json:"eventTime"`
	Series                   *struct {
		LastObservedTime metav1.MicroTime `json:"lastObservedTime"`
	} `json:"series"`
}

// eventSeen is the event printer's Last Seen (0) and First Seen (7)
// cells. First Seen is the first timestamp, else the event time; Last
// Seen is the series' last observation, else the last timestamp, else
// First Seen.
func eventSeen(e *eventFields, eventsGroup bool) [2]want {
	first, last := e.FirstTimestamp.Time, e.LastTimestamp.Time
	if eventsGroup {
		first, last = e.DeprecatedFirstTimestamp.Time, e.DeprecatedLastTimestamp.Time
	}
	if first.IsZero() {
		first = e.EventTime.Time
	}
	if e.Series != nil {
		last = e.Series.LastObservedTime.Time
	} else if last.IsZero() {
		last = first
	}
	return [2]want{since(0, last), since(7, first)}
}

// decode reads the fields of an object.
func decode(object []byte, v any) error {
	return json.Unmarshal(object, v)
}
