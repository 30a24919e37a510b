// SPDX-License-Identifier: GPL-2.0
/*
 * Sizes and alignments of every C struct the Rust side of nvme_rsrdma touches, as GCC lays
 * them out. Compiled to assembly only (never linked); Kbuild turns the markers into
 * rust/layout_generated.rs and rust/bindings.rs asserts at compile time that bindgen's layout
 * (libclang's) is the same. A mismatch fails the build instead of corrupting memory.
 */
#include <linux/kbuild.h>

#include "bindings_helper.h"

#define LAYOUT(t)							\
	do {								\
		DEFINE(SIZEOF_##t, sizeof(struct t));			\
		DEFINE(ALIGNOF_##t, __alignof__(struct t));		\
	} while (0)

void rsrdma_layout(void);
void rsrdma_layout(void)
{
	LAYOUT(nvme_ctrl);
	LAYOUT(nvme_request);
	LAYOUT(nvme_command);
	LAYOUT(nvme_completion);
	LAYOUT(nvme_sgl_desc);
	LAYOUT(nvme_keyed_sgl_desc);
	LAYOUT(nvmf_ctrl_options);
	LAYOUT(nvme_ctrl_ops);
	LAYOUT(nvmf_transport_ops);
	LAYOUT(nvme_rdma_cm_req);
	LAYOUT(blk_mq_tag_set);
	LAYOUT(blk_mq_ops);
	LAYOUT(blk_mq_hw_ctx);
	LAYOUT(blk_mq_queue_data);
	LAYOUT(request);
	LAYOUT(request_queue);
	LAYOUT(ib_client);
	LAYOUT(ib_device);
	LAYOUT(ib_pd);
	LAYOUT(ib_cq);
	LAYOUT(ib_qp);
	LAYOUT(ib_mr);
	LAYOUT(ib_qp_init_attr);
	LAYOUT(ib_send_wr);
	LAYOUT(ib_recv_wr);
	LAYOUT(ib_reg_wr);
	LAYOUT(ib_sge);
	LAYOUT(ib_wc);
	LAYOUT(ib_cqe);
	LAYOUT(ib_event);
	LAYOUT(irq_poll);
	LAYOUT(irq_work);
	LAYOUT(rdma_cm_id);
	LAYOUT(rdma_cm_event);
	LAYOUT(rdma_conn_param);
	LAYOUT(scatterlist);
	LAYOUT(sg_table);
	LAYOUT(__kernel_sockaddr_storage);
	LAYOUT(work_struct);
	LAYOUT(delayed_work);
	LAYOUT(completion);
	DEFINE(OFFSETOF_request_pdu, sizeof(struct request));
}
