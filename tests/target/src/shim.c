// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of rsrdma-target's bindings: the verbs calls that are static inline functions in
 * <infiniband/verbs.h> (post, poll, notify), flat copies of the structures the Rust side reads
 * (CM events, work completions), and a few process helpers (non-blocking fds, signal flags).
 * Everything else is called directly from Rust with opaque pointers (src/ffi.rs).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A CM event, copied so that it can be acknowledged at once. */
struct shim_event {
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int32_t event;
	int32_t status;
	uint8_t private_data[256];
	uint32_t private_data_len;
	uint32_t responder_resources;
	uint32_t initiator_depth;
};

/* A work completion, flattened. */
struct shim_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t wc_flags;
	uint32_t invalidated_rkey;
	uint32_t qp_num;
	uint32_t vendor_err;
	uint32_t pad;
};

int shim_set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0)
		return -errno;
	return fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ? -errno : 0;
}

int shim_ec_fd(struct rdma_event_channel *ec)
{
	return ec->fd;
}

int shim_comp_fd(struct ibv_comp_channel *ch)
{
	return ch->fd;
}

/* Creates a listening id on ec bound to addr:port (IPv4). */
int shim_listen(struct rdma_event_channel *ec, const char *addr, uint16_t port, int backlog,
		struct rdma_cm_id **out)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct rdma_cm_id *id;

	if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
		return -EINVAL;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		return -errno;
	if (rdma_bind_addr(id, (struct sockaddr *)&sin) || rdma_listen(id, backlog)) {
		int err = -errno;

		rdma_destroy_id(id);
		return err;
	}
	*out = id;
	return 0;
}

/* A new id on ec for an active (connecting) side. */
int shim_create_id(struct rdma_event_channel *ec, struct rdma_cm_id **out)
{
	return rdma_create_id(ec, out, NULL, RDMA_PS_TCP) ? -errno : 0;
}

/* Starts resolving addr:port (IPv4) for id; ends with an ADDR_RESOLVED or ADDR_ERROR event. */
int shim_resolve_addr(struct rdma_cm_id *id, const char *addr, uint16_t port, int timeout_ms)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };

	if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
		return -EINVAL;
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, timeout_ms) ? -errno : 0;
}

int shim_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	return rdma_resolve_route(id, timeout_ms) ? -errno : 0;
}

int shim_connect(struct rdma_cm_id *id, uint8_t responder_resources, uint8_t initiator_depth)
{
	struct rdma_conn_param param = {
		.responder_resources = responder_resources,
		.initiator_depth = initiator_depth,
		.flow_control = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};

	return rdma_connect(id, &param) ? -errno : 0;
}

/* The next CM event, copied and acknowledged; -EAGAIN if there is none. */
int shim_get_event(struct rdma_event_channel *ec, struct shim_event *out)
{
	struct rdma_cm_event *ev;
	uint32_t len;

	if (rdma_get_cm_event(ec, &ev))
		return -errno;
	memset(out, 0, sizeof(*out));
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->event = ev->event;
	out->status = ev->status;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ||
	    ev->event == RDMA_CM_EVENT_ESTABLISHED) {
		len = ev->param.conn.private_data_len;
		if (len > sizeof(out->private_data))
			len = sizeof(out->private_data);
		if (ev->param.conn.private_data && len)
			memcpy(out->private_data, ev->param.conn.private_data, len);
		out->private_data_len = len;
		out->responder_resources = ev->param.conn.responder_resources;
		out->initiator_depth = ev->param.conn.initiator_depth;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

struct ibv_context *shim_id_verbs(struct rdma_cm_id *id)
{
	return id->verbs;
}

struct ibv_qp *shim_id_qp(struct rdma_cm_id *id)
{
	return id->qp;
}

/* The peer's IPv4 address of a connected id, as text. */
int shim_id_peer(struct rdma_cm_id *id, char *buf, int len)
{
	struct sockaddr *sa = rdma_get_peer_addr(id);

	if (!sa || sa->sa_family != AF_INET)
		return -EAFNOSUPPORT;
	if (!inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, buf, len))
		return -errno;
	return 0;
}

int shim_query_device(struct ibv_context *ctx, uint32_t *max_qp_rd_atom,
		      uint32_t *max_qp_init_rd_atom, uint32_t *max_qp_wr, uint32_t *max_cqe)
{
	struct ibv_device_attr attr;
	int ret = ibv_query_device(ctx, &attr);

	if (ret)
		return -ret;
	*max_qp_rd_atom = attr.max_qp_rd_atom;
	*max_qp_init_rd_atom = attr.max_qp_init_rd_atom;
	*max_qp_wr = attr.max_qp_wr;
	*max_cqe = attr.max_cqe;
	return 0;
}

/* An RC QP on id with one CQ for both directions. */
int shim_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq,
		   uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_inline)
{
	struct ibv_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = max_send_wr,
			.max_recv_wr = max_recv_wr,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = max_inline,
		},
	};

	return rdma_create_qp(id, pd, &attr) ? -errno : 0;
}

int shim_qp_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	return -ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

int shim_accept(struct rdma_cm_id *id, const void *private_data, uint8_t len,
		uint8_t responder_resources, uint8_t initiator_depth)
{
	struct rdma_conn_param param = {
		.private_data = private_data,
		.private_data_len = len,
		.responder_resources = responder_resources,
		.initiator_depth = initiator_depth,
		.flow_control = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};

	return rdma_accept(id, &param) ? -errno : 0;
}

int shim_reject(struct rdma_cm_id *id, const void *private_data, uint8_t len)
{
	return rdma_reject(id, private_data, len) ? -errno : 0;
}

struct ibv_mr *shim_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int remote)
{
	int access = IBV_ACCESS_LOCAL_WRITE;

	if (remote)
		access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	return ibv_reg_mr(pd, addr, len, access);
}

uint32_t shim_mr_lkey(struct ibv_mr *mr)
{
	return mr->lkey;
}

uint32_t shim_mr_rkey(struct ibv_mr *mr)
{
	return mr->rkey;
}

int shim_req_notify(struct ibv_cq *cq)
{
	return -ibv_req_notify_cq(cq, 0);
}

/* The next CQ event of the channel, acknowledged; -EAGAIN if there is none. */
int shim_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
	if (ibv_get_cq_event(ch, cq, ctx))
		return -errno;
	ibv_ack_cq_events(*cq, 1);
	return 0;
}

int shim_poll_cq(struct ibv_cq *cq, int n, struct shim_wc *out)
{
	struct ibv_wc wc[16];
	int i, got;

	if (n > 16)
		n = 16;
	got = ibv_poll_cq(cq, n, wc);
	for (i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].wc_flags = wc[i].wc_flags;
		out[i].invalidated_rkey = (wc[i].wc_flags & IBV_WC_WITH_INV) ?
			wc[i].invalidated_rkey : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

int shim_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	return -ibv_post_recv(qp, &wr, &bad);
}

enum { SHIM_SEND, SHIM_SEND_INV, SHIM_WRITE, SHIM_READ };
enum { SHIM_SIGNALED = 1, SHIM_INLINE = 2 };

/* One send work request; see the enums above for op and flags. */
int shim_post_send(struct ibv_qp *qp, uint64_t wr_id, int op, int flags, void *addr,
		   uint32_t len, uint32_t lkey, uint64_t remote_addr, uint32_t rkey,
		   uint32_t invalidate_rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	switch (op) {
	case SHIM_SEND:
		wr.opcode = IBV_WR_SEND;
		break;
	case SHIM_SEND_INV:
		wr.opcode = IBV_WR_SEND_WITH_INV;
		wr.invalidate_rkey = invalidate_rkey;
		break;
	case SHIM_WRITE:
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = remote_addr;
		wr.wr.rdma.rkey = rkey;
		break;
	case SHIM_READ:
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr.rdma.remote_addr = remote_addr;
		wr.wr.rdma.rkey = rkey;
		break;
	default:
		return -EINVAL;
	}
	if (flags & SHIM_SIGNALED)
		wr.send_flags |= IBV_SEND_SIGNALED;
	if (flags & SHIM_INLINE)
		wr.send_flags |= IBV_SEND_INLINE;
	if (len == 0)
		wr.num_sge = 0;
	return -ibv_post_send(qp, &wr, &bad);
}

/* Signals as flags the event loop polls (poll() returns EINTR when one arrives). */
static volatile sig_atomic_t shim_signals[65];

static void shim_on_signal(int sig)
{
	if (sig > 0 && sig < 65)
		shim_signals[sig] = 1;
}

int shim_catch_signal(int sig)
{
	struct sigaction sa = { .sa_handler = shim_on_signal };

	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL) ? -errno : 0;
}

int shim_take_signal(int sig)
{
	int was;

	if (sig <= 0 || sig >= 65)
		return 0;
	was = shim_signals[sig];
	shim_signals[sig] = 0;
	return was;
}

const char *shim_wc_status_str(uint32_t status)
{
	return ibv_wc_status_str((enum ibv_wc_status)status);
}

const char *shim_event_str(int event)
{
	return rdma_event_str((enum rdma_cm_event_type)event);
}
