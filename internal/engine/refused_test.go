package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/convoy-gcs/convoy/membership"
)

// A record that does not decode is logged and counted once per key and
// revision, however many state reads list it: written again, it counts
// again. A restart claim refused for its proof is counted once per
// incarnation, as a restart.
func TestRefusedCountedOnce(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ms, err := newMetrics(mp, Atomic)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	g := &Group{log: slog.New(slog.NewTextHandler(&logs, nil)), m: ms}
	m := &member{}
	bad := func(kind membership.RefusedKind, key string, rev int64) membership.RefusedJoin {
		return membership.RefusedJoin{Kind: kind, Member: membership.Member{ID: 3}, Key: key, Revision: rev,
			Err: fmt.Errorf("%w: not JSON", membership.ErrMalformedRecord)}
	}
	reg, join := membership.RefusedRegistration, membership.RefusedJoinRequest
	forged := func(rev int64) membership.RefusedJoin {
		return membership.RefusedJoin{Kind: membership.RefusedRestart, Member: membership.Member{ID: 3, Incarnation: 2}, Key: "/convoy/recoveries/1/3", Revision: rev,
			Err: fmt.Errorf("%w: bad ECDSA signature", membership.ErrJoinSignature)}
	}
	for _, refused := range [][]membership.RefusedJoin{
		{bad(reg, "/convoy/members/3", 9), forged(9)},
		{bad(reg, "/convoy/members/3", 9), bad(join, "/convoy/joins/3", 9), forged(10)},
		{bad(reg, "/convoy/members/3", 9), bad(join, "/convoy/joins/3", 9)},
		{bad(reg, "/convoy/members/3", 12)},
	} {
		m.refused(g, refused)
	}
	got := metricValues(t, reader)
	want := map[string]float64{
		"convoy.membership.refused.joins{kind=registration,reason=undecodable}": 2,
		"convoy.membership.refused.joins{kind=join,reason=undecodable}":         1,
		"convoy.membership.refused.joins{kind=restart,reason=signature}":        1,
	}
	checkMetrics(t, got, want, "convoy.membership.refused.joins")
	for s, v := range want {
		if got[s] != v {
			t.Errorf("%s = %v, want %v", s, got[s], v)
		}
	}
	if n := strings.Count(logs.String(), "does not decode"); n != 3 {
		t.Errorf("%d log lines, want 3:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "refused a restart claim"); n != 1 {
		t.Errorf("%d log lines of the restart claim, want 1:\n%s", n, logs.String())
	}
}
