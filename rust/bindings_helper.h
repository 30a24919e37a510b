/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Headers bindgen reads to generate rust/bindings_generated.rs for nvme_rsrdma.
 *
 * The NVMe host headers are private to drivers/nvme/host (Kbuild adds that directory to the
 * include path), so the kernel crate's own bindings cannot provide them.
 */
#include <linux/blk-mq.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/inet.h>
#include <linux/irq_work.h>
#include <linux/nvme.h>
#include <linux/nvme-rdma.h>
#include <linux/scatterlist.h>
#include <linux/workqueue.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "nvme.h"
#include "fabrics.h"

#include "glue.h"
