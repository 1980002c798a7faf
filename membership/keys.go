package membership

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Key layout of the view store in etcd. Every key lives under a prefix p
// (StoreConfig.Prefix, default "/convoy/"). Epochs are written as 20-digit
// zero-padded decimals so that keys sort by epoch and a range of epochs is
// a range of keys; member IDs are plain decimals. Values are JSON unless
// said otherwise.
//
//	{p}view                            View: the current view, the authoritative pointer
//	{p}views/{epoch}                   View: every committed view, kept until Trim
//	{p}members/{id}                    Member: registration, on the registrant's lease
//	{p}joins/{id}                      Member: join request, on the requester's lease
//	{p}leaves/{id}                     Member: graceful leave request (no lease)
//	{p}suspects/{epoch}/{suspect}/{by} text: why member by suspects member suspect in view epoch
//	{p}reports/{epoch}/{id}            Report: member id's final report for view epoch
//	{p}caughtup/{epoch}/{id}           Member: the joiner id admitted by view epoch has its state
//	{p}recover/{epoch}/{id}            Recovery: restarted member id's claim to restart view epoch, on its lease
//	{p}topics/{id}/{hex name}          TopicRequest: member id's standing wish about a topic (no lease)
//
// {p}view and {p}views/{epoch} are written together, only by Bootstrap and
// Install, and a view record never changes once written. Leases are
// liveness hints only: losing one removes a registration or a join
// request, never a member of a view. Caught-up marks are never deleted
// (Install's majority check relies on that).
type keys struct{ p string }

func (k keys) view() string               { return k.p + "view" }
func (k keys) views() string              { return k.p + "views/" }
func (k keys) viewAt(epoch uint64) string { return k.views() + epochKey(epoch) }
func (k keys) members() string            { return k.p + "members/" }
func (k keys) member(id ID) string        { return k.members() + idKey(id) }
func (k keys) joins() string              { return k.p + "joins/" }
func (k keys) join(id ID) string          { return k.joins() + idKey(id) }
func (k keys) leaves() string             { return k.p + "leaves/" }
func (k keys) leave(id ID) string         { return k.leaves() + idKey(id) }
func (k keys) suspects() string           { return k.p + "suspects/" }

func (k keys) suspectsAt(epoch uint64) string {
	return k.suspects() + epochKey(epoch) + "/"
}

func (k keys) suspect(epoch uint64, suspect, by ID) string {
	return k.suspectsAt(epoch) + idKey(suspect) + "/" + idKey(by)
}

func (k keys) reports() string                   { return k.p + "reports/" }
func (k keys) reportsAt(epoch uint64) string     { return k.reports() + epochKey(epoch) + "/" }
func (k keys) report(epoch uint64, id ID) string { return k.reportsAt(epoch) + idKey(id) }
func (k keys) caughtUps() string                 { return k.p + "caughtup/" }
func (k keys) topics() string                    { return k.p + "topics/" }

// topic is the key of member id's request about topic name (hex, so
// that any name makes one key part).
func (k keys) topic(id ID, name string) string {
	return k.topics() + idKey(id) + "/" + hex.EncodeToString([]byte(name))
}
func (k keys) recoveries() string               { return k.p + "recover/" }
func (k keys) recoveriesAt(epoch uint64) string { return k.recoveries() + epochKey(epoch) + "/" }

func (k keys) recovery(epoch uint64, id ID) string { return k.recoveriesAt(epoch) + idKey(id) }

func (k keys) caughtUp(epoch uint64, id ID) string {
	return k.caughtUps() + epochKey(epoch) + "/" + idKey(id)
}

// epochDigits is the width of an epoch in keys: enough for any uint64.
const epochDigits = 20

func epochKey(e uint64) string { return fmt.Sprintf("%0*d", epochDigits, e) }
func idKey(id ID) string       { return strconv.FormatUint(id, 10) }

// parseEpoch parses an epoch written by epochKey.
func parseEpoch(s string) (uint64, error) {
	if len(s) != epochDigits {
		return 0, fmt.Errorf("epoch %q is not %d digits", s, epochDigits)
	}
	return parseDecimal(s)
}

// parseID parses a member ID written by idKey.
func parseID(s string) (ID, error) {
	if s == "" || len(s) > epochDigits {
		return 0, fmt.Errorf("bad member id %q", s)
	}
	return parseDecimal(s)
}

func parseDecimal(s string) (uint64, error) {
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad number %q", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad number %q", s)
	}
	return n, nil
}

// splitKey removes prefix from key and splits the rest at "/" into
// exactly n parts.
func splitKey(key, prefix string, n int) ([]string, error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return nil, fmt.Errorf("key %q is not under %q", key, prefix)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != n {
		return nil, fmt.Errorf("key %q: want %d parts after %q", key, n, prefix)
	}
	return parts, nil
}
