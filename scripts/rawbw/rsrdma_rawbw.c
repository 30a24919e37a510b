// SPDX-License-Identifier: GPL-2.0
/*
 * rsrdma_rawbw: the raw RDMA bandwidth of an RDMA device, measured from the kernel, as a
 * ceiling for `make bench` (scripts/bench-guest.sh). Not part of the transport.
 *
 * Loading the module runs one measurement and keeps the module loaded with the result in
 * /sys/module/rsrdma_rawbw/parameters/result_kib_s (and one line in the kernel log):
 *
 *   insmod rsrdma_rawbw.ko addr=10.0.2.15 verb=write qps=4 msg_kib=4096 secs=5
 *
 * It connects @qps RC queue pairs to itself through the RDMA CM (a listener on @addr:@port
 * and one active side per pair) and keeps @depth RDMA WRITEs (or READs) of @msg_kib in flight
 * on each for @secs seconds after a one-second warm-up, completions polled in softirq
 * context. It moves data the way nvme_rsrdma does: from kernel memory with the device's
 * local DMA lkey, into (or out of) a region registered once by a REG_MR work request with
 * one page as large as the region. Userspace tools (perftest, rsrdma-target --raw-bw) pay
 * for pinned user pages and their own wake-ups; a kernel consumer does not.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/inet.h>
#include <linux/log2.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/wait.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#define RAWBW_MAX_QPS 8
#define RAWBW_MAX_DEPTH 16
#define RAWBW_CM_TIMEOUT_MS 5000

static char *addr = "";
module_param(addr, charp, 0444);
MODULE_PARM_DESC(addr, "IPv4 address of the RDMA device's netdev (listener and peer)");

static ushort port = 18600;
module_param(port, ushort, 0444);
MODULE_PARM_DESC(port, "RDMA CM port of the listener (default 18600)");

static char *verb = "write";
module_param(verb, charp, 0444);
MODULE_PARM_DESC(verb, "write (RDMA WRITE) or read (RDMA READ)");

static uint qps = 2;
module_param(qps, uint, 0444);
MODULE_PARM_DESC(qps, "Queue pairs, 1 to 8 (default 2)");

static uint depth = 2;
module_param(depth, uint, 0444);
MODULE_PARM_DESC(depth, "Messages in flight per queue pair, 1 to 16 (default 2)");

static uint msg_kib = 4096;
module_param(msg_kib, uint, 0444);
MODULE_PARM_DESC(msg_kib, "Message size in KiB, a power of two from 4 to 4096 (default 4096)");

static uint secs = 5;
module_param(secs, uint, 0444);
MODULE_PARM_DESC(secs, "Seconds measured, after a one-second warm-up (default 5)");

static ulong result_kib_s;
module_param(result_kib_s, ulong, 0444);
MODULE_PARM_DESC(result_kib_s, "Result: KiB/s moved (read only)");

struct rawbw_msg {
	struct ib_cqe cqe;
	struct rawbw_pair *pair;
};

struct rawbw_pair {
	unsigned int index;
	struct rdma_cm_id *cli;		/* active side: posts the transfers */
	struct rdma_cm_id *srv;		/* passive side: owns the registered region */
	struct ib_cq *cli_cq;
	struct ib_cq *srv_cq;
	struct completion cm_done;
	int cm_status;
	struct rawbw_msg msgs[RAWBW_MAX_DEPTH];
};

static struct rawbw {
	struct rdma_cm_id *listener;
	struct ib_device *dev;
	struct ib_pd *pd;
	struct rawbw_pair pairs[RAWBW_MAX_QPS];
	enum ib_wr_opcode opcode;
	size_t bytes;
	unsigned int order;
	void *local, *remote;
	u64 local_dma;
	struct scatterlist remote_sg;
	bool remote_mapped;
	struct ib_mr *mr;
	struct ib_cqe reg_cqe;
	struct completion reg_done;
	int reg_status;
	bool stop;
	bool failed;
	atomic64_t moved;
	atomic_t inflight;
	wait_queue_head_t drained;
} rawbw;

static int rawbw_post(struct rawbw_msg *m)
{
	struct ib_sge sge = {
		.addr = rawbw.local_dma,
		.length = rawbw.bytes,
		.lkey = rawbw.pd->local_dma_lkey,
	};
	struct ib_rdma_wr wr = {
		.wr = {
			.wr_cqe = &m->cqe,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = rawbw.opcode,
			.send_flags = IB_SEND_SIGNALED,
		},
		.remote_addr = rawbw.mr->iova,
		.rkey = rawbw.mr->rkey,
	};

	return ib_post_send(m->pair->cli->qp, &wr.wr, NULL);
}

static void rawbw_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct rawbw_msg *m = container_of(wc->wr_cqe, struct rawbw_msg, cqe);
	int ret;

	if (wc->status != IB_WC_SUCCESS) {
		if (!READ_ONCE(rawbw.stop))
			pr_err("qp %u: %s failed: %s\n", m->pair->index,
			       rawbw.opcode == IB_WR_RDMA_WRITE ? "RDMA WRITE" : "RDMA READ",
			       ib_wc_status_msg(wc->status));
		WRITE_ONCE(rawbw.failed, true);
		goto out;
	}
	atomic64_add(rawbw.bytes, &rawbw.moved);
	if (READ_ONCE(rawbw.stop))
		goto out;
	ret = rawbw_post(m);
	if (!ret)
		return;
	pr_err("qp %u: posting failed: %d\n", m->pair->index, ret);
	WRITE_ONCE(rawbw.failed, true);
out:
	if (atomic_dec_and_test(&rawbw.inflight))
		wake_up(&rawbw.drained);
}

static void rawbw_reg_done(struct ib_cq *cq, struct ib_wc *wc)
{
	rawbw.reg_status = wc->status;
	complete(&rawbw.reg_done);
}

static void rawbw_qp_attr(struct ib_qp_init_attr *attr, struct ib_cq *cq, u32 send_wr)
{
	memset(attr, 0, sizeof(*attr));
	attr->send_cq = cq;
	attr->recv_cq = cq;
	attr->cap.max_send_wr = send_wr;
	attr->cap.max_recv_wr = 1;
	attr->cap.max_send_sge = 1;
	attr->cap.max_recv_sge = 1;
	attr->sq_sig_type = IB_SIGNAL_REQ_WR;
	attr->qp_type = IB_QPT_RC;
}

/* The passive side of pair private_data[0]: a QP on the shared PD, accepted. */
static int rawbw_accept(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	const struct rdma_conn_param *req = &ev->param.conn;
	struct rdma_conn_param param = {};
	struct ib_qp_init_attr attr;
	struct rawbw_pair *p;
	unsigned int i;
	int ret;

	if (req->private_data_len < 1)
		return -EINVAL;
	i = *(const u8 *)req->private_data;
	if (i >= qps || rawbw.pairs[i].srv || id->device != rawbw.dev)
		return -EINVAL;
	p = &rawbw.pairs[i];
	p->srv_cq = ib_alloc_cq(id->device, NULL, 4, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(p->srv_cq))
		return PTR_ERR(p->srv_cq);
	rawbw_qp_attr(&attr, p->srv_cq, 1);
	ret = rdma_create_qp(id, rawbw.pd, &attr);
	if (ret)
		goto free_cq;
	id->context = p;
	param.responder_resources = min_t(u32, req->initiator_depth,
					  id->device->attrs.max_qp_rd_atom);
	param.initiator_depth = min_t(u32, req->responder_resources,
				      id->device->attrs.max_qp_init_rd_atom);
	ret = rdma_accept(id, &param);
	if (ret)
		goto destroy_qp;
	p->srv = id;
	return 0;

destroy_qp:
	rdma_destroy_qp(id);
free_cq:
	ib_free_cq(p->srv_cq);
	p->srv_cq = NULL;
	return ret;
}

static int rawbw_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct rawbw_pair *p = id->context;

	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* Non-zero makes the CM destroy the new id. */
		return rawbw_accept(id, ev);
	}
	/* Only the active side of a pair waits for events. */
	if (!p || id != p->cli)
		return 0;
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
	case RDMA_CM_EVENT_ESTABLISHED:
		p->cm_status = 0;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		pr_err("qp %u: %s (status %d)\n", p->index, rdma_event_msg(ev->event),
		       ev->status);
		p->cm_status = -ECONNREFUSED;
		break;
	default:
		return 0;
	}
	complete(&p->cm_done);
	return 0;
}

static int rawbw_wait_cm(struct rawbw_pair *p)
{
	if (!wait_for_completion_timeout(&p->cm_done, msecs_to_jiffies(RAWBW_CM_TIMEOUT_MS)))
		return -ETIMEDOUT;
	reinit_completion(&p->cm_done);
	return p->cm_status;
}

/* Allocates the buffers and the PD on the device the first pair resolved to. */
static int rawbw_setup_device(struct ib_device *dev)
{
	rawbw.dev = dev;
	rawbw.pd = ib_alloc_pd(dev, 0);
	if (IS_ERR(rawbw.pd))
		return PTR_ERR(rawbw.pd);
	rawbw.local = (void *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, rawbw.order);
	rawbw.remote = (void *)__get_free_pages(GFP_KERNEL | __GFP_ZERO, rawbw.order);
	if (!rawbw.local || !rawbw.remote)
		return -ENOMEM;
	rawbw.local_dma = ib_dma_map_single(dev, rawbw.local, rawbw.bytes, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, rawbw.local_dma)) {
		rawbw.local_dma = 0;
		return -ENOMEM;
	}
	sg_init_one(&rawbw.remote_sg, rawbw.remote, rawbw.bytes);
	if (ib_dma_map_sg(dev, &rawbw.remote_sg, 1, DMA_BIDIRECTIONAL) != 1)
		return -ENOMEM;
	rawbw.remote_mapped = true;
	rawbw.mr = ib_alloc_mr(rawbw.pd, IB_MR_TYPE_MEM_REG, 1);
	if (IS_ERR(rawbw.mr))
		return PTR_ERR(rawbw.mr);
	/* One MR page as large as the region, as nvme_rsrdma registers its pool chunks. */
	if (!(dev->attrs.page_size_cap & rawbw.bytes) ||
	    ib_map_mr_sg(rawbw.mr, &rawbw.remote_sg, 1, NULL, rawbw.bytes) != 1) {
		pr_err("%s cannot register %zu bytes as one page\n", dev_name(&dev->dev),
		       rawbw.bytes);
		return -EINVAL;
	}
	return 0;
}

/* Resolves, creates and connects the active side of pair @p. */
static int rawbw_connect(struct rawbw_pair *p, struct sockaddr *dst)
{
	struct rdma_conn_param param = {};
	struct ib_qp_init_attr attr;
	u8 index = p->index;
	int ret;

	init_completion(&p->cm_done);
	p->cli = rdma_create_id(&init_net, rawbw_cm_handler, p, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(p->cli))
		return PTR_ERR(p->cli);
	ret = rdma_resolve_addr(p->cli, NULL, dst, RAWBW_CM_TIMEOUT_MS);
	if (!ret)
		ret = rawbw_wait_cm(p);
	if (!ret)
		ret = rdma_resolve_route(p->cli, RAWBW_CM_TIMEOUT_MS);
	if (!ret)
		ret = rawbw_wait_cm(p);
	if (ret)
		return ret;
	if (!rawbw.dev) {
		ret = rawbw_setup_device(p->cli->device);
		if (ret)
			return ret;
	} else if (p->cli->device != rawbw.dev) {
		return -EXDEV;
	}
	/* Room for the transfers and, on the first pair, the registration. */
	p->cli_cq = ib_alloc_cq(rawbw.dev, NULL, depth + 2,
				 p->index % max(rawbw.dev->num_comp_vectors, 1), IB_POLL_SOFTIRQ);
	if (IS_ERR(p->cli_cq))
		return PTR_ERR(p->cli_cq);
	rawbw_qp_attr(&attr, p->cli_cq, depth + 1);
	ret = rdma_create_qp(p->cli, rawbw.pd, &attr);
	if (ret)
		return ret;
	param.responder_resources = rawbw.dev->attrs.max_qp_rd_atom;
	param.initiator_depth = rawbw.dev->attrs.max_qp_init_rd_atom;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	param.private_data = &index;
	param.private_data_len = sizeof(index);
	ret = rdma_connect(p->cli, &param);
	if (!ret)
		ret = rawbw_wait_cm(p);
	return ret;
}

static int rawbw_register(void)
{
	struct ib_reg_wr wr = {
		.wr = {
			.wr_cqe = &rawbw.reg_cqe,
			.opcode = IB_WR_REG_MR,
			.send_flags = IB_SEND_SIGNALED,
		},
		.mr = rawbw.mr,
		.key = rawbw.mr->rkey,
		.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE,
	};
	int ret;

	rawbw.reg_cqe.done = rawbw_reg_done;
	init_completion(&rawbw.reg_done);
	ret = ib_post_send(rawbw.pairs[0].cli->qp, &wr.wr, NULL);
	if (ret)
		return ret;
	if (!wait_for_completion_timeout(&rawbw.reg_done, msecs_to_jiffies(RAWBW_CM_TIMEOUT_MS)))
		return -ETIMEDOUT;
	return rawbw.reg_status == IB_WC_SUCCESS ? 0 : -EIO;
}

static int rawbw_run(void)
{
	u64 moved0 = 0, moved1 = 0;
	ktime_t t0 = 0, t1 = 0;
	unsigned int i, j;
	s64 us;
	int ret = 0;

	atomic_set(&rawbw.inflight, 1);
	for (i = 0; i < qps && !ret; i++) {
		for (j = 0; j < depth && !ret; j++) {
			struct rawbw_msg *m = &rawbw.pairs[i].msgs[j];

			m->pair = &rawbw.pairs[i];
			m->cqe.done = rawbw_done;
			atomic_inc(&rawbw.inflight);
			ret = rawbw_post(m);
			if (ret)
				atomic_dec(&rawbw.inflight);
		}
	}
	if (!ret) {
		msleep(1000);
		moved0 = atomic64_read(&rawbw.moved);
		t0 = ktime_get();
		msleep(secs * 1000);
		moved1 = atomic64_read(&rawbw.moved);
		t1 = ktime_get();
	}
	WRITE_ONCE(rawbw.stop, true);
	atomic_dec(&rawbw.inflight);
	/* Every posted transfer completes, successfully or flushed. */
	if (!wait_event_timeout(rawbw.drained, !atomic_read(&rawbw.inflight), 30 * HZ)) {
		pr_err("transfers did not drain\n");
		return -ETIMEDOUT;
	}
	if (ret)
		return ret;
	if (READ_ONCE(rawbw.failed))
		return -EIO;
	us = ktime_us_delta(t1, t0);
	result_kib_s = us > 0 ? div64_u64((moved1 - moved0) * USEC_PER_SEC, us) >> 10 : 0;
	return 0;
}

static void rawbw_teardown(void)
{
	unsigned int i;

	for (i = 0; i < RAWBW_MAX_QPS; i++) {
		struct rawbw_pair *p = &rawbw.pairs[i];

		if (!IS_ERR_OR_NULL(p->cli) && p->cli->qp)
			rdma_disconnect(p->cli);
	}
	if (!IS_ERR_OR_NULL(rawbw.listener))
		rdma_destroy_id(rawbw.listener);
	for (i = 0; i < RAWBW_MAX_QPS; i++) {
		struct rawbw_pair *p = &rawbw.pairs[i];

		if (p->srv) {
			rdma_destroy_qp(p->srv);
			rdma_destroy_id(p->srv);
		}
		if (!IS_ERR_OR_NULL(p->cli)) {
			if (p->cli->qp)
				rdma_destroy_qp(p->cli);
			rdma_destroy_id(p->cli);
		}
		if (!IS_ERR_OR_NULL(p->srv_cq))
			ib_free_cq(p->srv_cq);
		if (!IS_ERR_OR_NULL(p->cli_cq))
			ib_free_cq(p->cli_cq);
	}
	if (!IS_ERR_OR_NULL(rawbw.mr))
		ib_dereg_mr(rawbw.mr);
	if (rawbw.remote_mapped)
		ib_dma_unmap_sg(rawbw.dev, &rawbw.remote_sg, 1, DMA_BIDIRECTIONAL);
	if (rawbw.local_dma)
		ib_dma_unmap_single(rawbw.dev, rawbw.local_dma, rawbw.bytes, DMA_BIDIRECTIONAL);
	if (rawbw.remote)
		free_pages((unsigned long)rawbw.remote, rawbw.order);
	if (rawbw.local)
		free_pages((unsigned long)rawbw.local, rawbw.order);
	if (!IS_ERR_OR_NULL(rawbw.pd))
		ib_dealloc_pd(rawbw.pd);
}

static int __init rawbw_init(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	const char *name;
	unsigned int i;
	int ret;

	if (!strcmp(verb, "write")) {
		rawbw.opcode = IB_WR_RDMA_WRITE;
		name = "RDMA WRITE";
	} else if (!strcmp(verb, "read")) {
		rawbw.opcode = IB_WR_RDMA_READ;
		name = "RDMA READ";
	} else {
		pr_err("verb=%s: not write or read\n", verb);
		return -EINVAL;
	}
	if (!in4_pton(addr, -1, (u8 *)&sin.sin_addr.s_addr, -1, NULL)) {
		pr_err("addr=%s: not an IPv4 address\n", addr);
		return -EINVAL;
	}
	if (!qps || qps > RAWBW_MAX_QPS || !depth || depth > RAWBW_MAX_DEPTH || !secs ||
	    msg_kib < 4 || msg_kib > 4096 || !is_power_of_2(msg_kib)) {
		pr_err("qps 1-%d, depth 1-%d, secs > 0, msg_kib a power of two from 4 to 4096\n",
		       RAWBW_MAX_QPS, RAWBW_MAX_DEPTH);
		return -EINVAL;
	}
	rawbw.bytes = (size_t)msg_kib << 10;
	rawbw.order = get_order(rawbw.bytes);
	init_waitqueue_head(&rawbw.drained);

	rawbw.listener = rdma_create_id(&init_net, rawbw_cm_handler, NULL, RDMA_PS_TCP,
					IB_QPT_RC);
	if (IS_ERR(rawbw.listener))
		return PTR_ERR(rawbw.listener);
	ret = rdma_bind_addr(rawbw.listener, (struct sockaddr *)&sin);
	if (!ret)
		ret = rdma_listen(rawbw.listener, RAWBW_MAX_QPS);
	if (ret) {
		pr_err("cannot listen on %pISpc: %d\n", &sin, ret);
		goto out;
	}
	for (i = 0; i < qps; i++) {
		rawbw.pairs[i].index = i;
		ret = rawbw_connect(&rawbw.pairs[i], (struct sockaddr *)&sin);
		if (ret) {
			pr_err("qp %u: cannot connect to %pISpc: %d\n", i, &sin, ret);
			goto out;
		}
	}
	ret = rawbw_register();
	if (ret) {
		pr_err("registering the region failed: %d\n", ret);
		goto out;
	}
	ret = rawbw_run();
	if (ret) {
		pr_err("%s over %u QP: %d\n", name, qps, ret);
		goto out;
	}
	pr_info("%s on %s, %u QP x %u in flight x %u KiB, %u s: %lu KiB/s (%lu MiB/s)\n", name,
		dev_name(&rawbw.dev->dev), qps, depth, msg_kib, secs, result_kib_s,
		result_kib_s >> 10);
out:
	rawbw_teardown();
	return ret;
}

static void __exit rawbw_exit(void)
{
}

module_init(rawbw_init);
module_exit(rawbw_exit);

MODULE_DESCRIPTION("Raw RDMA bandwidth from the kernel, the ceiling of nvme-rsrdma's benchmark");
MODULE_LICENSE("GPL");
