package convoy

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestReportAfterEtcdOutage: the survivors of a crash are cut off etcd
// for longer than a write to it is retried (asyncTimeout), so the final
// reports they write once wedged are given up. Whom they hear does not
// change meanwhile; once etcd is back, they find that it does not hold
// their reports, write them again, and the next view follows. (A report
// was once written again only when whom its member hears changed: the
// view change waited for the lost reports for good.)
func TestReportAfterEtcdOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSimCluster(t)
		nodes := c.openAll(3)
		c.sim.setCut(1, true)
		c.sim.setCut(2, true)
		c.crash(3)
		time.Sleep(asyncTimeout + 10*time.Second)
		c.sim.setCut(1, false)
		c.sim.setCut(2, false)
		c.waitView(2, 2, nodes[:2]...)
		c.check()
	})
}
