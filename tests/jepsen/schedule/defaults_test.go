package schedule_test

import (
	"testing"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/tests/jepsen/schedule"
)

// TestDefaults: the defaults that stand for the library's are the
// library's.
func TestDefaults(t *testing.T) {
	if schedule.DefaultDetectionTimeout != convoy.DefaultSuspectTimeout {
		t.Errorf("DefaultDetectionTimeout = %v, the library's suspect timeout is %v", schedule.DefaultDetectionTimeout, convoy.DefaultSuspectTimeout)
	}
	if schedule.DefaultLeaseTTL != membership.DefaultLeaseTTL {
		t.Errorf("DefaultLeaseTTL = %v, the library's lease TTL is %v", schedule.DefaultLeaseTTL, membership.DefaultLeaseTTL)
	}
}
