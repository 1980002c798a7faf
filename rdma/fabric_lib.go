//go:build fabric

package rdma

// The few calls into libfabric the fabric backend makes. Each wrapper is
// one cgo call that does a whole step (open an endpoint, post one
// operation, read a batch of completions), so that crossings stay few.
// Nothing here calls back into Go: completions and connection events are
// read by goroutines of the endpoint.
//
// Pointers: operation contexts, control slots and headers live in C
// memory. Payload buffers are Go memory, pinned (runtime.Pinner) for as
// long as libfabric may touch them: from the post until its completion,
// or while a cached registration covers them.

/*
#cgo pkg-config: libfabric
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define CV_API FI_VERSION(1, 10)

// cv_op is one posted operation. op_context points at it, which serves
// providers that require FI_CONTEXT or FI_CONTEXT2 as well; the vectors
// stay valid until completion (FI_ASYNC_IOV).
typedef struct {
	struct fi_context2 ctx;
	uint64_t id;
	struct iovec iov[2];
	void *desc[2];
} cv_op;

// cv_comp is one completion, good or failed.
typedef struct {
	uint64_t id;
	uint64_t flags;
	uint64_t len;
	uint64_t data;
	int32_t err;
	int32_t prov_err;
} cv_comp;

// cv_eqev is one connection-management event.
typedef struct {
	uint32_t event;
	int32_t err;
	int32_t prov_err;
	uint32_t datalen;
	uint64_t ctx;
	struct fi_info *info;
	uint8_t data[256];
} cv_eqev;

static int cv_getinfo(const char *prov, const char *node, const char *service, uint64_t flags,
		const char *fabric, const char *domain, struct fi_info **out) {
	struct fi_info *hints = fi_allocinfo();
	if (!hints)
		return -FI_ENOMEM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA | FI_ASYNC_IOV;
	hints->ep_attr->type = FI_EP_MSG;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->fabric_attr->prov_name = strdup(prov);
	if (fabric)
		hints->fabric_attr->name = strdup(fabric);
	if (domain)
		hints->domain_attr->name = strdup(domain);
	int ret = fi_getinfo(CV_API, node, service, flags, hints, out);
	fi_freeinfo(hints);
	return ret;
}

// cv_open opens the fabric, domain, event queue, completion queue and
// listening endpoint of info. It returns the step that failed in *step.
static int cv_open(struct fi_info *info, size_t cqsize, struct fid_fabric **fab, struct fid_domain **dom,
		struct fid_eq **eq, struct fid_cq **cq, struct fid_pep **pep, int *step) {
	int ret;
	*step = 1;
	if ((ret = fi_fabric(info->fabric_attr, fab, NULL)))
		return ret;
	*step = 2;
	struct fi_eq_attr eqa = { .size = 4096, .wait_obj = FI_WAIT_UNSPEC };
	if ((ret = fi_eq_open(*fab, &eqa, eq, NULL)))
		return ret;
	*step = 3;
	if ((ret = fi_domain(*fab, info, dom, NULL)))
		return ret;
	*step = 4;
	struct fi_cq_attr cqa = { .size = cqsize, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_UNSPEC };
	if ((ret = fi_cq_open(*dom, &cqa, cq, NULL)))
		return ret;
	*step = 5;
	if ((ret = fi_passive_ep(*fab, info, pep, NULL)))
		return ret;
	*step = 6;
	if ((ret = fi_pep_bind(*pep, &(*eq)->fid, 0)))
		return ret;
	*step = 7;
	return fi_listen(*pep);
}

static int cv_getname(struct fid *f, void *addr, size_t *len) { return fi_getname(f, addr, len); }

// cv_ep_open makes an endpoint of info (a copy, with the given queue
// sizes) whose fid context is ctx, bound to eq and cq, and enables it.
static int cv_ep_open(struct fid_domain *dom, struct fi_info *info, uint64_t ctx, size_t tx, size_t rx,
		struct fid_eq *eq, struct fid_cq *cq, struct fid_ep **ep) {
	struct fi_info *i = fi_dupinfo(info);
	if (!i)
		return -FI_ENOMEM;
	i->tx_attr->size = tx;
	i->rx_attr->size = rx;
	int ret = fi_endpoint(dom, i, ep, (void *)(uintptr_t)ctx);
	fi_freeinfo(i);
	if (ret)
		return ret;
	ret = fi_ep_bind(*ep, &eq->fid, 0);
	if (!ret)
		ret = fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_enable(*ep);
	if (ret) {
		fi_close(&(*ep)->fid);
		*ep = NULL;
	}
	return ret;
}

static int cv_connect(struct fid_ep *ep, const void *addr, const void *param, size_t len) {
	return fi_connect(ep, addr, param, len);
}
static int cv_accept(struct fid_ep *ep, const void *param, size_t len) { return fi_accept(ep, param, len); }
static int cv_reject(struct fid_pep *pep, struct fi_info *info) { return fi_reject(pep, info->handle, NULL, 0); }
static int cv_shutdown(struct fid_ep *ep) { return fi_shutdown(ep, 0); }
static int cv_close_ep(struct fid_ep *ep) { return fi_close(&ep->fid); }
static int cv_close_pep(struct fid_pep *pep) { return fi_close(&pep->fid); }
static int cv_close_cq(struct fid_cq *cq) { return fi_close(&cq->fid); }
static int cv_close_eq(struct fid_eq *eq) { return fi_close(&eq->fid); }
static int cv_close_mr(struct fid_mr *mr) { return fi_close(&mr->fid); }
static int cv_close_domain(struct fid_domain *d) { return fi_close(&d->fid); }
static int cv_close_fabric(struct fid_fabric *f) { return fi_close(&f->fid); }

static int cv_mr_reg(struct fid_domain *dom, void *buf, size_t len, uint64_t key, struct fid_mr **mr, void **desc) {
	int ret = fi_mr_reg(dom, buf, len, FI_SEND | FI_RECV, 0, key, 0, mr, NULL);
	if (ret)
		return ret;
	*desc = fi_mr_desc(*mr);
	return 0;
}

// cv_post_recv posts a receive scattered into hdr (hdrlen bytes) and buf.
static ssize_t cv_post_recv(struct fid_ep *ep, cv_op *op, void *hdr, size_t hdrlen, void *hdesc,
		void *buf, size_t len, void *bdesc) {
	op->iov[0].iov_base = hdr;
	op->iov[0].iov_len = hdrlen;
	op->desc[0] = hdesc;
	size_t n = 1;
	if (len > 0) {
		op->iov[1].iov_base = buf;
		op->iov[1].iov_len = len;
		op->desc[1] = bdesc;
		n = 2;
	}
	struct fi_msg msg = { .msg_iov = op->iov, .desc = op->desc, .iov_count = n, .context = op };
	return fi_recvmsg(ep, &msg, 0);
}

// cv_post_send posts a send gathered from hdr and buf, with data as
// remote completion data if withdata is set.
static ssize_t cv_post_send(struct fid_ep *ep, cv_op *op, void *hdr, size_t hdrlen, void *hdesc,
		void *buf, size_t len, void *bdesc, uint64_t data, int withdata) {
	op->iov[0].iov_base = hdr;
	op->iov[0].iov_len = hdrlen;
	op->desc[0] = hdesc;
	size_t n = 1;
	if (len > 0) {
		op->iov[1].iov_base = buf;
		op->iov[1].iov_len = len;
		op->desc[1] = bdesc;
		n = 2;
	}
	struct fi_msg msg = { .msg_iov = op->iov, .desc = op->desc, .iov_count = n, .context = op, .data = data };
	return fi_sendmsg(ep, &msg, withdata ? FI_REMOTE_CQ_DATA : 0);
}

#define CV_BATCH 64

// cv_cq_poll reads up to max (at most CV_BATCH) completions into out,
// waiting up to timeout milliseconds (-1: no bound) for the first. It
// returns their number, 0 if none came, or a negative error.
static int cv_cq_poll(struct fid_cq *cq, cv_comp *out, int max, int timeout) {
	struct fi_cq_data_entry e[CV_BATCH];
	if (max > CV_BATCH)
		max = CV_BATCH;
	ssize_t n = fi_cq_read(cq, e, max);
	if (n == -FI_EAGAIN && timeout != 0)
		n = fi_cq_sread(cq, e, max, NULL, timeout);
	// A signal (the Go runtime's, to preempt) interrupts the wait.
	if (n == -FI_EAGAIN || n == -FI_EINTR)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err;
		memset(&err, 0, sizeof err);
		ssize_t r = fi_cq_readerr(cq, &err, 0);
		if (r == -FI_EAGAIN)
			return 0;
		if (r < 0)
			return (int)r;
		out[0].id = err.op_context ? ((cv_op *)err.op_context)->id : 0;
		out[0].flags = err.flags;
		out[0].len = err.len;
		out[0].data = err.data;
		out[0].err = err.err ? err.err : FI_EOTHER;
		out[0].prov_err = err.prov_errno;
		return 1;
	}
	if (n < 0)
		return (int)n;
	for (ssize_t i = 0; i < n; i++) {
		out[i].id = ((cv_op *)e[i].op_context)->id;
		out[i].flags = e[i].flags;
		out[i].len = e[i].len;
		out[i].data = e[i].data;
		out[i].err = 0;
		out[i].prov_err = 0;
	}
	return (int)n;
}

static int cv_cq_signal(struct fid_cq *cq) { return fi_cq_signal(cq); }

// cv_eq_read reads one event into ev, waiting up to timeout milliseconds.
// It returns 1 for an event, 0 for none, or a negative error. The fid of
// an event is dereferenced for its context: endpoints are closed only on
// the goroutine that reads events, so it is never one already freed.
static int cv_eq_read(struct fid_eq *eq, cv_eqev *ev, int timeout) {
	struct {
		struct fi_eq_cm_entry e;
		uint8_t data[256];
	} buf;
	uint32_t event = 0;
	memset(ev, 0, sizeof *ev);
	ssize_t n = fi_eq_sread(eq, &event, &buf, sizeof buf, timeout, 0);
	if (n == -FI_EAGAIN || n == -FI_EINTR)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_eq_err_entry err;
		memset(&err, 0, sizeof err);
		ssize_t r = fi_eq_readerr(eq, &err, 0);
		if (r == -FI_EAGAIN)
			return 0;
		if (r < 0)
			return (int)r;
		ev->event = 0;
		ev->err = err.err ? err.err : FI_EOTHER;
		ev->prov_err = err.prov_errno;
		ev->ctx = err.fid ? (uint64_t)(uintptr_t)err.fid->context : 0;
		return 1;
	}
	if (n < 0)
		return (int)n;
	ev->event = event;
	if (event == FI_NOTIFY)
		return 1;
	ev->ctx = buf.e.fid ? (uint64_t)(uintptr_t)buf.e.fid->context : 0;
	ev->info = buf.e.info;
	if ((size_t)n > sizeof buf.e) {
		size_t d = (size_t)n - sizeof buf.e;
		if (d > sizeof ev->data)
			d = sizeof ev->data;
		memcpy(ev->data, buf.data, d);
		ev->datalen = (uint32_t)d;
	}
	return 1;
}

static int cv_eq_wake(struct fid_eq *eq) {
	struct fi_eq_entry e;
	memset(&e, 0, sizeof e);
	ssize_t n = fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, 0);
	return n < 0 ? (int)n : 0;
}

static const char *cv_prov_name(struct fi_info *i) { return i->fabric_attr->prov_name; }
static uint32_t cv_prov_version(struct fi_info *i) { return i->fabric_attr->prov_version; }
static const char *cv_fabric_name(struct fi_info *i) { return i->fabric_attr->name; }
static const char *cv_domain_name(struct fi_info *i) { return i->domain_attr->name; }
static uint64_t cv_mr_mode(struct fi_info *i) { return (uint64_t)i->domain_attr->mr_mode; }
static size_t cv_cq_data_size(struct fi_info *i) { return i->domain_attr->cq_data_size; }
static size_t cv_max_msg_size(struct fi_info *i) { return i->ep_attr->max_msg_size; }
static size_t cv_tx_size(struct fi_info *i) { return i->tx_attr->size; }
static size_t cv_rx_size(struct fi_info *i) { return i->rx_attr->size; }
static size_t cv_tx_iov_limit(struct fi_info *i) { return i->tx_attr->iov_limit; }
static size_t cv_rx_iov_limit(struct fi_info *i) { return i->rx_attr->iov_limit; }
static void *cv_dest_addr(struct fi_info *i) { return i->dest_addr; }
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"unsafe"
)

// fiError is a failed libfabric call. It wraps the errno-like code.
type fiError struct {
	op   string
	code int // positive FI_E* value
}

func (e *fiError) Error() string {
	return fmt.Sprintf("%s: %s", e.op, C.GoString(C.fi_strerror(C.int(e.code))))
}

// fiErr returns the error of a call that returned ret (negative on
// failure), or nil.
func fiErr(op string, ret C.int) error {
	if ret >= 0 {
		return nil
	}
	return &fiError{op: op, code: int(-ret)}
}

// errAgain reports whether err is libfabric's "try again" (a full queue).
func errAgain(err error) bool {
	var fe *fiError
	return errors.As(err, &fe) && fe.code == C.FI_EAGAIN
}

// fiCode returns the libfabric error code of err, or 0.
func fiCode(err error) int {
	var fe *fiError
	if errors.As(err, &fe) {
		return fe.code
	}
	return 0
}

const (
	fiCanceled    = int(C.FI_ECANCELED)
	fiConnRefused = int(C.FI_ECONNREFUSED)
	fiMRLocal     = uint64(C.FI_MR_LOCAL)
	fiMRProvKey   = uint64(C.FI_MR_PROV_KEY)
	fiMRVirtAddr  = uint64(C.FI_MR_VIRT_ADDR)
	fiRecv        = uint64(C.FI_RECV)
	fiRemoteData  = uint64(C.FI_REMOTE_CQ_DATA)
	eqConnReq     = uint32(C.FI_CONNREQ)
	eqConnected   = uint32(C.FI_CONNECTED)
	eqShutdown    = uint32(C.FI_SHUTDOWN)
	eqNotify      = uint32(C.FI_NOTIFY)
	cqBatch       = int(C.CV_BATCH)
)

// fiStrerror describes a libfabric error code.
func fiStrerror(code int) string { return C.GoString(C.fi_strerror(C.int(code))) }

// fiInfo is a list of fi_info structures from fi_getinfo, of which the
// first is used. Free releases it.
type fiInfo struct{ p *C.struct_fi_info }

// getInfoMu serializes fi_getinfo. Its provider discovery works on
// process-wide state, and concurrent calls have been seen to crash
// (ofiwg/libfabric#5860): the lock guards that process-wide library, so it
// is process-wide too.
var getInfoMu sync.Mutex

// getInfo asks libfabric for a connected endpoint of provider at
// node:service (a local address with source set, else a peer's), in the
// given fabric and domain if they are not empty.
func getInfo(provider, node, service string, source bool, fabric, domain string) (fiInfo, error) {
	getInfoMu.Lock()
	defer getInfoMu.Unlock()
	cprov := C.CString(provider)
	defer C.free(unsafe.Pointer(cprov))
	var cnode, cservice, cfabric, cdomain *C.char
	if node != "" {
		cnode = C.CString(node)
		defer C.free(unsafe.Pointer(cnode))
	}
	if service != "" {
		cservice = C.CString(service)
		defer C.free(unsafe.Pointer(cservice))
	}
	if fabric != "" {
		cfabric = C.CString(fabric)
		defer C.free(unsafe.Pointer(cfabric))
	}
	if domain != "" {
		cdomain = C.CString(domain)
		defer C.free(unsafe.Pointer(cdomain))
	}
	var flags C.uint64_t
	if source {
		flags = C.FI_SOURCE
	}
	var out *C.struct_fi_info
	if err := fiErr("fi_getinfo", C.cv_getinfo(cprov, cnode, cservice, flags, cfabric, cdomain, &out)); err != nil {
		return fiInfo{}, err
	}
	if out == nil {
		return fiInfo{}, &fiError{op: "fi_getinfo", code: int(C.FI_ENODATA)}
	}
	return fiInfo{out}, nil
}

func (i fiInfo) free() {
	if i.p != nil {
		C.fi_freeinfo(i.p)
	}
}

// dup returns a copy of i, which the caller frees.
func (i fiInfo) dup() (fiInfo, error) {
	d := C.fi_dupinfo(i.p)
	if d == nil {
		return fiInfo{}, &fiError{op: "fi_dupinfo", code: int(C.FI_ENOMEM)}
	}
	return fiInfo{d}, nil
}

func (i fiInfo) provName() string   { return C.GoString(C.cv_prov_name(i.p)) }
func (i fiInfo) fabricName() string { return C.GoString(C.cv_fabric_name(i.p)) }
func (i fiInfo) domainName() string { return C.GoString(C.cv_domain_name(i.p)) }
func (i fiInfo) mrMode() uint64     { return uint64(C.cv_mr_mode(i.p)) }
func (i fiInfo) cqDataSize() int    { return int(C.cv_cq_data_size(i.p)) }
func (i fiInfo) maxMsgSize() uint64 { return uint64(C.cv_max_msg_size(i.p)) }
func (i fiInfo) txSize() int        { return int(C.cv_tx_size(i.p)) }
func (i fiInfo) rxSize() int        { return int(C.cv_rx_size(i.p)) }
func (i fiInfo) iovLimit() (tx, rx int) {
	return int(C.cv_tx_iov_limit(i.p)), int(C.cv_rx_iov_limit(i.p))
}
func (i fiInfo) provVersion() (major, minor int) {
	v := uint32(C.cv_prov_version(i.p))
	return int(v >> 16), int(v & 0xffff)
}

// fiFabric holds the objects one endpoint opens once: fabric, domain,
// event queue, completion queue and listening endpoint.
type fiFabric struct {
	fab *C.struct_fid_fabric
	dom *C.struct_fid_domain
	eq  *C.struct_fid_eq
	cq  *C.struct_fid_cq
	pep *C.struct_fid_pep
}

var openSteps = [...]string{"", "fi_fabric", "fi_eq_open", "fi_domain", "fi_cq_open", "fi_passive_ep", "fi_pep_bind", "fi_listen"}

// openFabric opens the objects of info and starts listening. On failure
// it closes what it opened.
func openFabric(info fiInfo, cqSize int) (*fiFabric, error) {
	f := &fiFabric{}
	var step C.int
	ret := C.cv_open(info.p, C.size_t(cqSize), &f.fab, &f.dom, &f.eq, &f.cq, &f.pep, &step)
	if err := fiErr(openSteps[step], ret); err != nil {
		f.close()
		return nil, err
	}
	return f, nil
}

// close closes every object of f, the endpoints using them closed first.
func (f *fiFabric) close() {
	if f.pep != nil {
		C.cv_close_pep(f.pep)
	}
	if f.cq != nil {
		C.cv_close_cq(f.cq)
	}
	if f.eq != nil {
		C.cv_close_eq(f.eq)
	}
	if f.dom != nil {
		C.cv_close_domain(f.dom)
	}
	if f.fab != nil {
		C.cv_close_fabric(f.fab)
	}
	*f = fiFabric{}
}

// listenAddr returns the address the listening endpoint is bound to.
func (f *fiFabric) listenAddr() (string, error) {
	var buf [128]byte
	n := C.size_t(len(buf))
	if err := fiErr("fi_getname", C.cv_getname(&f.pep.fid, unsafe.Pointer(&buf[0]), &n)); err != nil {
		return "", err
	}
	return sockaddrString(buf[:min(int(n), len(buf))]), nil
}

// sockaddrString formats a Linux sockaddr_in or sockaddr_in6 as
// host:port, and other addresses in hex.
func sockaddrString(b []byte) string {
	if len(b) >= 2 {
		port := func() uint16 { return binary.BigEndian.Uint16(b[2:4]) }
		switch binary.NativeEndian.Uint16(b[0:2]) {
		case C.AF_INET:
			if len(b) >= 8 {
				ip := netip.AddrFrom4([4]byte(b[4:8]))
				return net.JoinHostPort(ip.String(), fmt.Sprint(port()))
			}
		case C.AF_INET6:
			if len(b) >= 24 {
				ip := netip.AddrFrom16([16]byte(b[8:24]))
				return net.JoinHostPort(ip.String(), fmt.Sprint(port()))
			}
		}
	}
	return fmt.Sprintf("%x", b)
}

// fiEP is one active libfabric endpoint.
type fiEP struct{ p *C.struct_fid_ep }

// openEP makes an enabled endpoint of info with fid context ctx.
func (f *fiFabric) openEP(info fiInfo, ctx uint64, tx, rx int) (fiEP, error) {
	var ep *C.struct_fid_ep
	err := fiErr("fi_endpoint", C.cv_ep_open(f.dom, info.p, C.uint64_t(ctx), C.size_t(tx), C.size_t(rx), f.eq, f.cq, &ep))
	return fiEP{ep}, err
}

func (ep fiEP) connect(info fiInfo, hello []byte) error {
	return fiErr("fi_connect", C.cv_connect(ep.p, C.cv_dest_addr(info.p), unsafe.Pointer(&hello[0]), C.size_t(len(hello))))
}

func (ep fiEP) accept(hello []byte) error {
	return fiErr("fi_accept", C.cv_accept(ep.p, unsafe.Pointer(&hello[0]), C.size_t(len(hello))))
}

func (ep fiEP) shutdown() error { return fiErr("fi_shutdown", C.cv_shutdown(ep.p)) }
func (ep fiEP) close() error    { return fiErr("fi_close", C.cv_close_ep(ep.p)) }

// reject refuses the connection request of info (from a CONNREQ event).
func (f *fiFabric) reject(info fiInfo) error { return fiErr("fi_reject", C.cv_reject(f.pep, info.p)) }

// fiMR is a memory registration and its local descriptor.
type fiMR struct {
	p    *C.struct_fid_mr
	desc unsafe.Pointer // C memory (or nil), passed back to libfabric only
}

// register registers n bytes at p for local sends and receives.
func (f *fiFabric) register(p unsafe.Pointer, n int, key uint64) (fiMR, error) {
	var mr fiMR
	err := fiErr("fi_mr_reg", C.cv_mr_reg(f.dom, p, C.size_t(n), C.uint64_t(key), &mr.p, &mr.desc))
	return mr, err
}

func (mr fiMR) close() error { return fiErr("fi_close(mr)", C.cv_close_mr(mr.p)) }

// cOp is an operation context in C memory.
type cOp = C.cv_op

// cMem is a block of C memory, for operation contexts, headers and control
// slots, which libfabric may hold on to.
type cMem struct {
	p unsafe.Pointer
	n int
}

func allocC(n int) cMem {
	p := C.calloc(1, C.size_t(n))
	if p == nil {
		panic("rdma: out of C memory")
	}
	return cMem{p, n}
}

func (m cMem) free() { C.free(m.p) }

// bytes returns the memory as a byte slice (Go never keeps it past free).
func (m cMem) bytes() []byte { return unsafe.Slice((*byte)(m.p), m.n) }

// ops returns the memory as an array of n operation contexts.
func (m cMem) ops(n int) []cOp { return unsafe.Slice((*cOp)(m.p), n) }

var opSize = int(unsafe.Sizeof(cOp{}))

// setOpID sets the id a completion of op reports.
func setOpID(op *cOp, id uint64) { op.id = C.uint64_t(id) }

// postRecv posts a receive into hdr and buf with context op.
func (ep fiEP) postRecv(op *cOp, hdr []byte, hdesc unsafe.Pointer, buf []byte, bdesc unsafe.Pointer) error {
	var bp unsafe.Pointer
	if len(buf) > 0 {
		bp = unsafe.Pointer(&buf[0])
	}
	ret := C.cv_post_recv(ep.p, op, unsafe.Pointer(&hdr[0]), C.size_t(len(hdr)), hdesc, bp, C.size_t(len(buf)), bdesc)
	return fiErr("fi_recvmsg", C.int(ret))
}

// postSend posts a send of hdr and buf with context op, and data as
// remote completion data if withData is set.
func (ep fiEP) postSend(op *cOp, hdr []byte, hdesc unsafe.Pointer, buf []byte, bdesc unsafe.Pointer, data uint64, withData bool) error {
	var bp unsafe.Pointer
	if len(buf) > 0 {
		bp = unsafe.Pointer(&buf[0])
	}
	wd := C.int(0)
	if withData {
		wd = 1
	}
	ret := C.cv_post_send(ep.p, op, unsafe.Pointer(&hdr[0]), C.size_t(len(hdr)), hdesc, bp, C.size_t(len(buf)), bdesc, C.uint64_t(data), wd)
	return fiErr("fi_sendmsg", C.int(ret))
}

// fiComp is one completion.
type fiComp = C.cv_comp

// pollCQ reads completions into out, waiting up to timeoutMS for the
// first (-1: no bound).
func (f *fiFabric) pollCQ(out []fiComp, timeoutMS int) (int, error) {
	n := C.cv_cq_poll(f.cq, &out[0], C.int(len(out)), C.int(timeoutMS))
	if n < 0 {
		return 0, fiErr("fi_cq_sread", n)
	}
	return int(n), nil
}

// wakeCQ makes a pollCQ waiting on another goroutine return.
func (f *fiFabric) wakeCQ() { C.cv_cq_signal(f.cq) }

// fiEvent is one connection-management event.
type fiEvent = C.cv_eqev

// readEQ reads one event into ev, waiting up to timeoutMS.
func (f *fiFabric) readEQ(ev *fiEvent, timeoutMS int) (bool, error) {
	n := C.cv_eq_read(f.eq, ev, C.int(timeoutMS))
	if n < 0 {
		return false, fiErr("fi_eq_sread", n)
	}
	return n == 1, nil
}

// wakeEQ makes a readEQ waiting on another goroutine return.
func (f *fiFabric) wakeEQ() { C.cv_eq_wake(f.eq) }

// eventData returns the connection data of ev.
func eventData(ev *fiEvent) []byte { return C.GoBytes(unsafe.Pointer(&ev.data[0]), C.int(ev.datalen)) }

// eventInfo returns the fi_info of a CONNREQ event, which the caller frees.
func eventInfo(ev *fiEvent) fiInfo { return fiInfo{ev.info} }
