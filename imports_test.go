package convoy

import (
	"os/exec"
	"strings"
	"testing"
)

// A program that uses the library with an external etcd compiles no etcd
// server: the embedded one is in package etcddev, which the library does
// not import.
func TestImportsNoEtcdServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "go.etcd.io/etcd/server/") || p == "github.com/convoy-gcs/convoy/etcddev" {
			t.Errorf("the library imports %s", p)
		}
	}
}

// The durable log compiles no etcd client: it takes its view records from
// package membership/record.
func TestPersistenceImportsNoEtcd(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./persistence").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.etcd.io/") {
			t.Errorf("package persistence imports %s", p)
		}
	}
}
