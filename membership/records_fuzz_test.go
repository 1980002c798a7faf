package membership

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// FuzzDecodeRecords feeds the decoders of the store's etcd records —
// what any process with access to the group's prefix can write — with
// arbitrary keys and values in every directory of the layout. A decoder
// may refuse a record; it must never panic, and what it accepts must say
// what its key says. A registration or join request it refuses is
// listed in State.Refused, never a reason for the state not to decode.
func FuzzDecodeRecords(f *testing.F) {
	k := keys{"/convoy/"}
	view, _ := json.Marshal(View{Epoch: 3, Members: []Member{{ID: 1, Incarnation: 5, Addr: "10.0.0.1:7000"}}, Sent: []uint64{0}})
	member, _ := json.Marshal(Member{ID: 2, Incarnation: 7, Addr: "10.0.0.2:7000"})
	report, _ := json.Marshal(Report{Epoch: 3, Member: Member{ID: 1, Incarnation: 5}})
	recovery, _ := json.Marshal(Recovery{Epoch: 3, Member: Member{ID: 1, Incarnation: 9}, LogLast: 40})
	f.Add(uint8(0), "", view)
	f.Add(uint8(1), "2", member)
	f.Add(uint8(2), "2", []byte(`{"id":2,"incarnation":7,"addr":"x","log":{"last":4,"epoch":1,"sender":1,"seq":2}}`))
	f.Add(uint8(3), "1", report)
	f.Add(uint8(4), "2/1", []byte("silent for 250ms"))
	f.Add(uint8(5), "1", recovery)
	f.Add(uint8(6), "0000000000000003/1", []byte("5"))
	f.Add(uint8(1), "99999999999999999999", []byte("{}"))
	f.Add(uint8(0), "", []byte(`{"epoch":3,"members":null,"cut":[{"id":1}],"suffixes":[{"id":9,"from":0}]}`))
	topicReq, _ := json.Marshal(TopicRequest{Member: Member{ID: 2, Incarnation: 7}, Topic: "orders", Mode: TopicAtomic, Subscribe: true})
	f.Add(uint8(7), "2/6f7264657273", topicReq)
	f.Add(uint8(7), "2/6f72", topicReq)
	f.Add(uint8(7), "2/", []byte(`{"member":{"id":2},"topic":"","subscribe":true}`))
	f.Add(uint8(0), "", []byte(`{"epoch":3,"members":[{"id":1}],"sent":[0],"topics":[{"name":"a","mode":"atomic","subscribers":[1,9],"sent":[1,2,3],"cut":[{"id":1,"seq":4}]}]}`))
	f.Fuzz(func(t *testing.T, dir uint8, key string, value []byte) {
		const epoch = 3
		var prefix string
		switch dir % 8 {
		case 0:
			prefix = k.view()
		case 1:
			prefix = k.members()
		case 2:
			prefix = k.joins()
		case 3:
			prefix = k.reportsAt(epoch)
		case 4:
			prefix = k.suspectsAt(epoch)
		case 5:
			prefix = k.recoveriesAt(epoch)
		case 6:
			prefix = k.caughtUps()
		case 7:
			prefix = k.topics()
		}
		kv := []*mvccpb.KeyValue{{Key: []byte(prefix + key), Value: value}}
		s := &Store{k: k}
		switch dir % 8 {
		case 0:
			if v, err := decodeView(kv[0], 0); err == nil {
				if _, err := s.decodeState(1, v, nil, nil, nil, nil, nil, nil); err != nil {
					t.Fatalf("a view decoded, then its state did not: %v", err)
				}
				// A view's topics, however odd, go through a decision.
				_, _ = Decide(1, ChangeInput{Current: v, Topics: []TopicRequest{{Member: Member{ID: 1}, Topic: "a", Subscribe: true}}})
			}
		case 1:
			m, err := decodeMember(kv[0], k.members())
			if err == nil && idKey(m.ID) != key {
				t.Fatalf("member %d decoded from key %q", m.ID, key)
			}
			checkOneRecord(t, s, kv, nil, err == nil)
		case 2:
			_, err := decodeMember(kv[0], k.joins())
			checkOneRecord(t, s, nil, kv, err == nil)
		case 3:
			if r, err := decodeReport(kv[0], k.reportsAt(epoch), epoch); err == nil && (r.Epoch != epoch || idKey(r.Member.ID) != key) {
				t.Fatalf("report %+v decoded from key %q", r, key)
			}
			s.decodeState(1, View{Epoch: epoch}, nil, nil, nil, nil, kv, nil)
		case 4:
			s.decodeState(1, View{Epoch: epoch}, nil, nil, nil, kv, nil, nil)
		case 5:
			rs, refused := s.decodeRecoveries(kv, epoch)
			for id, r := range rs {
				if r.Epoch != epoch || r.Member.ID != id || idKey(id) != key {
					t.Fatalf("claim %+v decoded as member %d's, from key %q", r, id, key)
				}
			}
			if len(rs)+len(refused) != 1 || len(refused) == 1 && !errors.Is(refused[0].Err, ErrMalformedRecord) {
				t.Fatalf("claims %v, refused %v: want the record in one of them", rs, refused)
			}
		case 6:
			s.decodeState(1, View{Epoch: epoch, Members: []Member{{ID: 1, Incarnation: 5}}}, nil, nil, nil, nil, nil, kv)
		case 7:
			rs, err := decodeTopicRequests(kv, k.topics())
			if err != nil {
				return
			}
			for _, r := range rs {
				if want := idKey(r.Member.ID) + "/" + hex.EncodeToString([]byte(r.Topic)); want != key {
					t.Fatalf("request %+v decoded from key %q", r, key)
				}
			}
			cur := View{Epoch: epoch, Members: []Member{{ID: 1, Incarnation: 5}, {ID: 2, Incarnation: 7}}, Sent: []uint64{0, 0}}
			for _, r := range topicRequests(rs, cur.Members) {
				if checkTopicRequest(&r) != nil {
					t.Fatalf("a bad request %+v counts", r)
				}
			}
			_, _ = Decide(1, ChangeInput{Current: cur, Topics: rs})
		}
	})
}

// checkOneRecord checks the state of one registration or join request:
// it decodes, and the record is either admitted (ok) or refused as
// malformed, with its key.
func checkOneRecord(t *testing.T, s *Store, members, joins []*mvccpb.KeyValue, ok bool) {
	t.Helper()
	st, err := s.decodeState(1, View{}, members, joins, nil, nil, nil, nil)
	if err != nil {
		t.Fatalf("one record failed the state: %v", err)
	}
	if n := len(st.Registered) + len(st.Joins); ok != (n == 1) {
		t.Fatalf("decoded %v, yet state has %d registrations and joins", ok, n)
	}
	if ok {
		return
	}
	kv := append(members, joins...)[0]
	if len(st.Refused) != 1 || !errors.Is(st.Refused[0].Err, ErrMalformedRecord) || st.Refused[0].Key != string(kv.Key) {
		t.Fatalf("Refused %+v, want the record at %q, malformed", st.Refused, kv.Key)
	}
}
