package oracle

import (
	"math/rand"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// words are the strings the filler draws from: values the printers branch on.
var words = []string{"", "a", "b", "Always", "True", "False", "Unknown", "Initialized", "Ready",
	"PodScheduled", "SchedulingGated", "PodInitializing", "Complete", "Failed", "Suspended",
	"Completed", "Running", "Succeeded", "Pending", "CrashLoopBackOff", "OnFailure", "Never",
	"x<y>&z", "NodeLost", "Normal", "Warning"}

var (
	timeType      = reflect.TypeOf(metav1.Time{})
	microTimeType = reflect.TypeOf(metav1.MicroTime{})
	quantityType  = reflect.TypeOf(resource.Quantity{})
	fieldsType    = reflect.TypeOf(metav1.FieldsV1{})
)

// filler fills objects at random; every time it sets lies within a few
// seconds before base, or is zero.
type filler struct {
	r    *rand.Rand
	base time.Time
}

func (f *filler) fill(v reflect.Value, depth int) {
	switch v.Type() {
	case timeType:
		if f.r.Intn(5) > 0 {
			t := f.base.Add(-time.Duration(3+f.r.Intn(4)) * time.Second).Truncate(time.Second)
			v.Set(reflect.ValueOf(metav1.NewTime(t)))
		}
		return
	case microTimeType:
		if f.r.Intn(5) > 0 {
			t := f.base.Add(-3*time.Second - time.Duration(f.r.Int63n(int64(4*time.Second)))).Truncate(time.Microsecond)
			v.Set(reflect.ValueOf(metav1.NewMicroTime(t)))
		}
		return
	case fieldsType:
		v.Set(reflect.ValueOf(metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}))
		return
	case quantityType:
		if f.r.Intn(2) == 0 {
			v.Set(reflect.ValueOf(resource.MustParse("1")))
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(words[f.r.Intn(len(words))])
	case reflect.Bool:
		v.SetBool(f.r.Intn(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(f.r.Intn(4)))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.r.Intn(4)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.r.Intn(4)))
	case reflect.Pointer:
		if depth > 6 || f.r.Intn(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 6 {
			return
		}
		n := f.r.Intn(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if depth > 6 {
			return
		}
		n := f.r.Intn(3)
		m := reflect.MakeMapWithSize(v.Type(), n)
		for i := 0; i < n; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(k, depth+1)
			f.fill(e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	}
}
