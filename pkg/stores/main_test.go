package stores

import (
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
