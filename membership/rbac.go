package membership

import clientv3 "go.etcd.io/etcd/client/v3"

// Permission is a range of etcd keys a member needs access to, as etcd's
// role-based access control grants it (etcdctl role grant-permission):
// the key alone if RangeEnd is empty, else [Key, RangeEnd); Write says
// read and write, else read only.
type Permission struct {
	Key, RangeEnd string
	Write         bool
}

// MemberPermissions returns the etcd permissions member id of the group
// under prefix needs, and no more that etcd's access control can tell
// apart: read on the whole prefix; write on the keys any member may write
// (the view, as a view change's leader; join and leave requests, which
// the leader deletes once served; suspicions, reports, caught-up marks,
// restart claims, whose keys begin with an epoch); and write on its own
// registration and topic requests only. Given a role with these per
// member, a member's etcd credentials cannot delete or replace another
// member's registration, which the member would otherwise lose its place
// for at its next view change.
func MemberPermissions(prefix string, id ID) []Permission {
	k := keys{p: prefix}
	p := func(key string) Permission {
		return Permission{Key: key, RangeEnd: clientv3.GetPrefixRangeEnd(key), Write: true}
	}
	return []Permission{
		{Key: prefix, RangeEnd: clientv3.GetPrefixRangeEnd(prefix)},
		{Key: k.view(), Write: true},
		p(k.views()),
		p(k.joins()),
		p(k.leaves()),
		p(k.suspects()),
		p(k.reports()),
		p(k.caughtUps()),
		p(k.recoveries()),
		{Key: k.member(id), Write: true},
		p(k.topics() + idKey(id) + "/"),
	}
}
