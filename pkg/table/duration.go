package table

import (
	"strconv"
	"time"
)

// appendHumanDuration appends what
// k8s.io/apimachinery/pkg/util/duration.HumanDuration(d) returns, as the
// inside of a JSON string (its one non-alphanumeric result, <invalid>,
// escaped as encoding/json escapes it). It allocates nothing; the tests
// hold it equal to HumanDuration.
func appendHumanDuration(dst []byte, d time.Duration) []byte {
	s := int64(d / time.Second)
	switch {
	case s < -1:
		return append(dst, invalidJSON...)
	case s < 0:
		return append(dst, "0s"...)
	case s < 2*60:
		return appendUnits(dst, s, 's', 0, 0)
	}
	m := s / 60
	switch {
	case m < 10:
		return appendUnits(dst, m, 'm', s%60, 's')
	case m < 3*60:
		return appendUnits(dst, m, 'm', 0, 0)
	}
	h := m / 60
	switch {
	case h < 8:
		return appendUnits(dst, h, 'h', m%60, 'm')
	case h < 48:
		return appendUnits(dst, h, 'h', 0, 0)
	case h < 8*24:
		return appendUnits(dst, h/24, 'd', h%24, 'h')
	case h < 2*365*24:
		return appendUnits(dst, h/24, 'd', 0, 0)
	case h < 8*365*24:
		return appendUnits(dst, h/24/365, 'y', (h/24)%365, 'd')
	}
	return appendUnits(dst, h/24/365, 'y', 0, 0)
}

// appendUnits appends "<a><unitA>" followed by "<b><unitB>" when b is not
// zero.
func appendUnits(dst []byte, a int64, unitA byte, b int64, unitB byte) []byte {
	dst = strconv.AppendInt(dst, a, 10)
	dst = append(dst, unitA)
	if b != 0 {
		dst = strconv.AppendInt(dst, b, 10)
		dst = append(dst, unitB)
	}
	return dst
}

// The printers' constant cells, as encoding/json writes them inside a
// string.
const (
	invalidJSON = `\u003cinvalid\u003e`
	unknownJSON = `\u003cunknown\u003e`
	noneJSON    = `\u003cnone\u003e`
)
