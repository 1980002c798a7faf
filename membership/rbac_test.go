package membership

import "testing"

// TestMemberPermissions: member 1's permissions let it write its own
// registration and topic requests and the shared keys, read everything
// under the prefix, and write none of member 10's keys, whose ids begin
// alike, nor anything outside the prefix.
func TestMemberPermissions(t *testing.T) {
	const p = "/convoy/"
	perms := MemberPermissions(p, 1)
	allowed := func(key string) (read, write bool) {
		for _, pm := range perms {
			in := key == pm.Key || pm.RangeEnd != "" && key >= pm.Key && key < pm.RangeEnd
			if in {
				read = true
				write = write || pm.Write
			}
		}
		return read, write
	}
	for _, tc := range []struct {
		key         string
		read, write bool
	}{
		{p + "members/1", true, true},
		{p + "members/10", true, false},
		{p + "members/2", true, false},
		{p + "topics/1/74", true, true},
		{p + "topics/10/74", true, false},
		{p + "view", true, true},
		{p + "views/00000000000000000007", true, true},
		{p + "joins/10", true, true},
		{p + "leaves/2", true, true},
		{p + "suspects/00000000000000000007/2/3", true, true},
		{p + "reports/00000000000000000007/2", true, true},
		{p + "caughtup/00000000000000000007/2", true, true},
		{p + "recover/00000000000000000007/2", true, true},
		{"/other/members/1", false, false},
	} {
		if read, write := allowed(tc.key); read != tc.read || write != tc.write {
			t.Errorf("%s: read %v, write %v; want %v, %v", tc.key, read, write, tc.read, tc.write)
		}
	}
}
