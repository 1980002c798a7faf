package netns

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The nfnetlink queue protocol (linux/netfilter/nfnetlink_queue.h): the
// messages and attributes a delayer uses.
const (
	nfqMsgPacket  = 0 // NFQNL_MSG_PACKET: a packet queued to userspace
	nfqMsgVerdict = 1 // NFQNL_MSG_VERDICT
	nfqMsgConfig  = 2 // NFQNL_MSG_CONFIG

	nfqaPacketHdr  = 1 // NFQA_PACKET_HDR: packet id, protocol, hook
	nfqaVerdictHdr = 2 // NFQA_VERDICT_HDR: verdict, packet id

	nfqaCfgCmd      = 1 // NFQA_CFG_CMD
	nfqaCfgParams   = 2 // NFQA_CFG_PARAMS: copy range, copy mode
	nfqaCfgQueueLen = 3 // NFQA_CFG_QUEUE_MAXLEN
	nfqaCfgMask     = 4 // NFQA_CFG_MASK
	nfqaCfgFlags    = 5 // NFQA_CFG_FLAGS

	nfqCmdBind   = 1 // NFQNL_CFG_CMD_BIND
	nfqCopyMeta  = 1 // NFQNL_COPY_META: the packet's metadata, not its bytes
	nfqFailOpen  = 1 // NFQA_CFG_F_FAIL_OPEN: accept, not drop, when the queue is full
	nfqGSO       = 4 // NFQA_CFG_F_GSO: queue GSO packets whole
	nfAccept     = 1 // NF_ACCEPT
	nfqQueueLen  = 1 << 16
	nfqRecvBytes = 8 << 20
)

// delayer holds the packets of one netfilter queue of a host for a
// delay, give or take a jitter, then lets them go: the userspace half of
// a delay rule (see Switch.Delay).
type delayer struct {
	f      *os.File // the netlink socket, non-blocking
	rc     syscall.RawConn
	queue  uint16
	delay  time.Duration
	jitter time.Duration

	mu struct {
		sync.Mutex
		r       *rand.Rand
		pending verdicts
		seq     uint32
	}
	wake chan struct{}
	// stop ends the delayer: the releaser lets every packet go, then
	// closes released.
	stop     chan struct{}
	released chan struct{}
	wg       sync.WaitGroup // the reader
}

// verdict is a packet to let go at due.
type verdict struct {
	due time.Time
	id  uint32
}

// verdicts is a min-heap of verdicts by due time.
type verdicts []verdict

func (v verdicts) Len() int           { return len(v) }
func (v verdicts) Less(i, j int) bool { return v[i].due.Before(v[j].due) }
func (v verdicts) Swap(i, j int)      { v[i], v[j] = v[j], v[i] }
func (v *verdicts) Push(x any)        { *v = append(*v, x.(verdict)) }
func (v *verdicts) Pop() any {
	old := *v
	x := old[len(old)-1]
	*v = old[:len(old)-1]
	return x
}

// startDelayer starts a delayer of queue in host i's namespace and
// returns the function that closes it.
func (s *Switch) startDelayer(i int, queue uint16, delay, jitter time.Duration, seed uint64) (func() error, error) {
	d, err := s.newDelayer(i, queue, delay, jitter, seed)
	if err != nil {
		return nil, err
	}
	return d.close, nil
}

// newDelayer binds queue in host i's namespace and starts delaying the
// packets queued there.
func (s *Switch) newDelayer(i int, queue uint16, delay, jitter time.Duration, seed uint64) (*delayer, error) {
	var fd int
	err := s.InHost(i, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns: netlink socket in host %d: %w", i, err)
	}
	f := os.NewFile(uintptr(fd), "nfqueue")
	fail := func(err error) (*delayer, error) {
		f.Close()
		return nil, fmt.Errorf("netns: netfilter queue %d of host %d: %w", queue, i, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fail(err)
	}
	// A large buffer, so that a burst of queued packets does not
	// overflow it (the kernel then drops their notices silently).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nfqRecvBytes)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	rc, err := f.SyscallConn()
	if err != nil {
		return fail(err)
	}
	d := &delayer{f: f, rc: rc, queue: queue, delay: delay, jitter: jitter,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), released: make(chan struct{})}
	d.mu.r = rand.New(rand.NewPCG(seed, uint64(i)))
	var cmd [4]byte
	cmd[0] = nfqCmdBind
	var params [5]byte
	params[4] = nfqCopyMeta
	if err := d.config(attr(nfqaCfgCmd, cmd[:])); err != nil {
		return fail(fmt.Errorf("bind: %w", err))
	}
	if err := d.config(attr(nfqaCfgParams, params[:]), attr(nfqaCfgQueueLen, be32(nfqQueueLen)),
		attr(nfqaCfgMask, be32(nfqFailOpen|nfqGSO)), attr(nfqaCfgFlags, be32(nfqFailOpen|nfqGSO))); err != nil {
		return fail(fmt.Errorf("configure: %w", err))
	}
	d.wg.Go(d.read)
	go d.release()
	return d, nil
}

// config sends a configuration message of attrs and waits for its
// acknowledgement.
func (d *delayer) config(attrs ...[]byte) error {
	seq := d.send(nfqMsgConfig, unix.NLM_F_ACK, attrs...)
	if seq == 0 {
		return errors.New("netlink send failed")
	}
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := d.recv(buf, deadline)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && m.Header.Seq == seq && len(m.Data) >= 4 {
				if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return syscall.Errno(-errno)
				}
				return nil
			}
		}
	}
	return errors.New("no acknowledgement")
}

// recv reads one datagram, waiting until deadline at most.
func (d *delayer) recv(buf []byte, deadline time.Time) (int, error) {
	if err := d.f.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err := d.rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// send sends one message of type msg with attrs and returns its
// sequence number (0 if it could not be sent).
func (d *delayer) send(msg uint16, flags uint16, attrs ...[]byte) uint32 {
	d.mu.Lock()
	d.mu.seq++
	seq := d.mu.seq
	d.mu.Unlock()
	b := message(msg, flags, seq, d.queue, attrs...)
	if err := d.write(b); err != nil {
		return 0
	}
	return seq
}

func (d *delayer) write(b []byte) error {
	var werr error
	err := d.rc.Write(func(fd uintptr) bool {
		werr = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return werr != unix.EAGAIN
	})
	return errors.Join(err, werr)
}

// read takes the packets the kernel queues and schedules their verdicts.
func (d *delayer) read() {
	buf := make([]byte, 1<<20)
	for {
		n, err := d.recv(buf, time.Time{})
		if err != nil {
			select {
			case <-d.stop:
				return
			case <-time.After(time.Millisecond):
				continue
			}
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		now := time.Now()
		d.mu.Lock()
		for _, m := range msgs {
			if m.Header.Type != unix.NFNL_SUBSYS_QUEUE<<8|nfqMsgPacket || len(m.Data) < 4 {
				continue
			}
			id, ok := packetID(m.Data[4:])
			if !ok {
				continue
			}
			wait := d.delay
			if d.jitter > 0 {
				wait += time.Duration(d.mu.r.Int64N(2*int64(d.jitter)+1)) - d.jitter
			}
			heap.Push(&d.mu.pending, verdict{due: now.Add(max(wait, 0)), id: id})
		}
		d.mu.Unlock()
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// release lets each packet go when it is due; once stopped, it lets
// every packet still held go at once.
func (d *delayer) release() {
	defer close(d.released)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		now := time.Now()
		var due []uint32
		for len(d.mu.pending) > 0 && !d.mu.pending[0].due.After(now) {
			due = append(due, heap.Pop(&d.mu.pending).(verdict).id)
		}
		next := time.Hour
		if len(d.mu.pending) > 0 {
			next = d.mu.pending[0].due.Sub(now)
		}
		d.mu.Unlock()
		d.accept(due)
		timer.Reset(next)
		select {
		case <-d.stop:
			d.mu.Lock()
			var all []uint32
			for _, v := range d.mu.pending {
				all = append(all, v.id)
			}
			d.mu.pending = nil
			d.mu.Unlock()
			d.accept(all)
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// accept lets the packets ids go, several verdicts a datagram.
func (d *delayer) accept(ids []uint32) {
	const perDatagram = 64
	for len(ids) > 0 {
		n := min(len(ids), perDatagram)
		var b []byte
		for _, id := range ids[:n] {
			d.mu.Lock()
			d.mu.seq++
			seq := d.mu.seq
			d.mu.Unlock()
			b = append(b, message(nfqMsgVerdict, 0, seq, d.queue, attr(nfqaVerdictHdr, append(be32(nfAccept), be32(id)...)))...)
		}
		_ = d.write(b)
		ids = ids[n:]
	}
}

// close lets every held packet go and closes the queue: the packets the
// kernel queues after that are lost, so remove the rules that queue them
// first.
func (d *delayer) close() error {
	close(d.stop)
	<-d.released
	err := d.f.Close() // ends the reader
	d.wg.Wait()
	return err
}

// packetID returns the packet id in the attributes of a packet message.
func packetID(attrs []byte) (uint32, bool) {
	for len(attrs) >= 4 {
		l := int(binary.NativeEndian.Uint16(attrs))
		t := binary.NativeEndian.Uint16(attrs[2:]) & 0x3fff
		if l < 4 || l > len(attrs) {
			return 0, false
		}
		if t == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(attrs[4:]), true
		}
		attrs = attrs[min(len(attrs), (l+3)&^3):]
	}
	return 0, false
}

// message encodes one nfnetlink queue message.
func message(msg, flags uint16, seq uint32, queue uint16, attrs ...[]byte) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint16(b[4:], unix.NFNL_SUBSYS_QUEUE<<8|msg)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	// nfgenmsg: family AF_UNSPEC, version 0, the queue (big-endian).
	binary.BigEndian.PutUint16(b[unix.NLMSG_HDRLEN+2:], queue)
	for _, a := range attrs {
		b = append(b, a...)
	}
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	return b
}

// attr encodes one netlink attribute, padded to four bytes.
func attr(typ uint16, v []byte) []byte {
	b := make([]byte, 4, 4+len(v)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
