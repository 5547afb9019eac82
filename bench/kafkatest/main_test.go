package kafkatest

import (
	"os"
	"testing"

	"github.com/ringstream/ringstream/localcluster"
)

// ringstreamBin is the ringstream binary built once for the package's tests.
var ringstreamBin string

// TestMain builds cmd/ringstream once; every test's nodes run it.
func TestMain(m *testing.M) { os.Exit(localcluster.RunWithBinary(m, &ringstreamBin)) }
