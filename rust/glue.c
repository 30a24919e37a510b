// SPDX-License-Identifier: GPL-2.0
/*
 * C glue of nvme_rsrdma. See glue.h: module parameters, log and dynamic debug call sites, and
 * thin wrappers for static inline functions and macros. The transport itself is Rust.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/gfp.h>
#include <linux/highmem.h>
#include <linux/inet.h>
#include <linux/irq_work.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/namei.h>
#include <linux/memremap.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/scatterlist.h>
#include <linux/seq_file.h>
#include <net/net_namespace.h>

#include "nvme.h"
#include "fabrics.h"
#include "glue.h"

bool rsrdma_dropin;
module_param_named(dropin, rsrdma_dropin, bool, 0444);
MODULE_PARM_DESC(dropin,
		 "Register the transport as \"rdma\" instead of \"rsrdma\" (the C nvme-rdma must not be loaded)");

unsigned int rsrdma_slot_kib = 16;
module_param_named(slot_kib, rsrdma_slot_kib, uint, 0444);
MODULE_PARM_DESC(slot_kib,
		 "Per-tag pool slot in KiB: I/O up to this size uses its tag's slot, no allocation (default 16)");

unsigned int rsrdma_io_pool_mib = 16;
module_param_named(io_pool_mib, rsrdma_io_pool_mib, uint, 0444);
MODULE_PARM_DESC(io_pool_mib,
		 "Pool area in MiB per controller, shared by its I/O queues, for I/O larger than a slot: 4 to 16 (default 16)");

unsigned int rsrdma_spread_kib = 128;
module_param_named(spread_kib, rsrdma_spread_kib, uint, 0644);
MODULE_PARM_DESC(spread_kib,
		 "Send I/O of at least this many KiB on the controller's I/O queues in turn, not only its own (0: never; default 128)");

unsigned int rsrdma_min_io_queues = 4;
module_param_named(min_io_queues, rsrdma_min_io_queues, uint, 0644);
MODULE_PARM_DESC(min_io_queues,
		 "Add dedicated write queues (as --nr-write-queues) to a controller whose connect options set none and that has fewer I/O queues than this, up to one per I/O queue (0: never; default 4)");

unsigned int rsrdma_area_mib = 64;
module_param_named(area_mib, rsrdma_area_mib, uint, 0644);
MODULE_PARM_DESC(area_mib,
		 "Registered area in MiB per subsystem, shared by its controllers, which processes map (/dev/rsrdma/<controller>) to do I/O without a copy: 0 (none) to 1024, read when a controller is created (default 64)");

/* Logging ------------------------------------------------------------------------------- */

void rsrdma_log(const struct nvme_ctrl *ctrl, enum rsrdma_log_level level, const char *msg)
{
	switch (level) {
	case RSRDMA_LOG_ERR_RATELIMITED:
		/* One call site: one limit for all such lines (of I/O a process keeps sending). */
		if (ctrl)
			dev_err_ratelimited(ctrl->device, "%s\n", msg);
		else
			pr_err_ratelimited("%s\n", msg);
		break;
	case RSRDMA_LOG_ERR:
		if (ctrl)
			dev_err(ctrl->device, "%s\n", msg);
		else
			pr_err("%s\n", msg);
		break;
	case RSRDMA_LOG_WARN:
		if (ctrl)
			dev_warn(ctrl->device, "%s\n", msg);
		else
			pr_warn("%s\n", msg);
		break;
	default:
		if (ctrl)
			dev_info(ctrl->device, "%s\n", msg);
		else
			pr_info("%s\n", msg);
		break;
	}
}

/*
 * One dynamic debug call site per class. Called with a NULL @msg, it only says whether the
 * call site is enabled, so that the Rust side formats a line only when it will be printed.
 */
#if defined(CONFIG_DYNAMIC_DEBUG)
#define RSRDMA_DBG_CLASS(class)							\
bool rsrdma_dbg_##class(const struct nvme_ctrl *ctrl, const char *msg)		\
{										\
	DEFINE_DYNAMIC_DEBUG_METADATA(descriptor, #class ": %s\n");		\
										\
	if (!DYNAMIC_DEBUG_BRANCH(descriptor))					\
		return false;							\
	if (msg && ctrl)							\
		__dynamic_dev_dbg(&descriptor, ctrl->device, #class ": %s\n", msg); \
	else if (msg)								\
		__dynamic_pr_debug(&descriptor, pr_fmt(#class ": %s\n"), msg); \
	return true;								\
}
#else
#define RSRDMA_DBG_CLASS(class)							\
bool rsrdma_dbg_##class(const struct nvme_ctrl *ctrl, const char *msg)		\
{										\
	return false;								\
}
#endif

RSRDMA_DBG_CLASS(cm)
RSRDMA_DBG_CLASS(queue)
RSRDMA_DBG_CLASS(pool)
RSRDMA_DBG_CLASS(io)
RSRDMA_DBG_CLASS(recovery)

/* blk-mq and NVMe core ------------------------------------------------------------------- */

void *rsrdma_rq_pdu(struct request *rq)
{
	return blk_mq_rq_to_pdu(rq);
}

struct request *rsrdma_rq_from_pdu(void *pdu)
{
	return blk_mq_rq_from_pdu(pdu);
}

unsigned int rsrdma_rq_payload_bytes(struct request *rq)
{
	return blk_rq_payload_bytes(rq);
}

bool rsrdma_rq_is_write(struct request *rq)
{
	return rq_data_dir(rq) == WRITE;
}

unsigned short rsrdma_rq_nr_phys_segments(struct request *rq)
{
	return blk_rq_nr_phys_segments(rq);
}

/*
 * Call @fn for each data segment of @rq, mapped into the kernel address space for the call.
 * Stops at the first non-zero return and returns it.
 */
int rsrdma_rq_visit_segments(struct request *rq, rsrdma_segment_fn fn, void *ctx)
{
	struct req_iterator iter;
	struct bio_vec bv;
	int ret = 0;

	if (rq->rq_flags & RQF_SPECIAL_PAYLOAD) {
		void *va = bvec_kmap_local(&rq->special_vec);

		ret = fn(ctx, va, rq->special_vec.bv_len);
		kunmap_local(va);
		return ret;
	}

	rq_for_each_segment(bv, rq, iter) {
		void *va = bvec_kmap_local(&bv);

		ret = fn(ctx, va, bv.bv_len);
		kunmap_local(va);
		if (ret)
			break;
	}
	return ret;
}

/*
 * Call @fn for each multi-page bvec of @rq's data with its first page frame, offset and
 * length. Stops at the first non-zero return and returns it; -EINVAL for a special payload or
 * no data.
 */
int rsrdma_rq_visit_bvecs(struct request *rq, rsrdma_pfn_fn fn, void *ctx)
{
	struct req_iterator iter;
	struct bio_vec v;
	int ret = 0;

	if ((rq->rq_flags & RQF_SPECIAL_PAYLOAD) || !rq->bio)
		return -EINVAL;
	rq_for_each_bvec(v, rq, iter) {
		ret = fn(ctx, page_to_pfn(v.bv_page), v.bv_offset, v.bv_len);
		if (ret)
			break;
	}
	return ret;
}

/*
 * The data of @rq as its multi-page bvecs (each physically contiguous), stored in @bv: their
 * number, or 0 when there are more than @max, none, or a special payload.
 */
unsigned int rsrdma_rq_bvecs(struct request *rq, struct bio_vec *bv, unsigned int max)
{
	struct req_iterator iter;
	struct bio_vec v;
	unsigned int n = 0;

	if ((rq->rq_flags & RQF_SPECIAL_PAYLOAD) || !rq->bio)
		return 0;
	rq_for_each_bvec(v, rq, iter) {
		if (n == max)
			return 0;
		bv[n++] = v;
	}
	return n;
}

/*
 * Whether the data of @rq lies in PCI peer-to-peer memory: 1 if all of it does, in the memory
 * of one provider (one page map), 0 if none of it does, -EREMOTEIO if it is mixed.
 */
int rsrdma_rq_p2p(struct request *rq)
{
	struct dev_pagemap *pgmap = NULL;
	struct req_iterator iter;
	struct bio_vec v;
	int p2p = -1;

	if ((rq->rq_flags & RQF_SPECIAL_PAYLOAD) || !rq->bio)
		return 0;
	rq_for_each_bvec(v, rq, iter) {
		int this = is_pci_p2pdma_page(v.bv_page);

		if (p2p < 0) {
			p2p = this;
			pgmap = this ? v.bv_page->pgmap : NULL;
		} else if (this != p2p || (this && v.bv_page->pgmap != pgmap)) {
			return -EREMOTEIO;
		}
	}
	return p2p > 0;
}

/* The PCI device after @from (NULL: the first), referenced; @from's reference is dropped. */
struct pci_dev *rsrdma_pci_next(struct pci_dev *from)
{
	return pci_get_device(PCI_ANY_ID, PCI_ANY_ID, from);
}

struct pci_dev *rsrdma_pci_dev_get(struct pci_dev *pdev)
{
	return pci_dev_get(pdev);
}

void rsrdma_pci_dev_put(struct pci_dev *pdev)
{
	pci_dev_put(pdev);
}

const char *rsrdma_pci_name(struct pci_dev *pdev)
{
	return pci_name(pdev);
}

/*
 * The peer-to-peer memory @pdev publishes (pci_p2pmem_publish()): its page map, referenced
 * (rsrdma_p2p_put() drops it), with its first page frame in @pfn and its size in pages in @nr.
 * NULL if @pdev publishes none, or its memory is going away. Only a BAR's first such range
 * is found; the NVMe driver, the one provider in the tree, publishes one.
 */
struct dev_pagemap *rsrdma_p2p_get(struct pci_dev *pdev, unsigned long *pfn, unsigned long *nr)
{
	int bar;

	if (!pci_has_p2pmem(pdev))
		return NULL;
	for (bar = 0; bar < PCI_STD_NUM_BARS; bar++) {
		resource_size_t start = pci_resource_start(pdev, bar);
		resource_size_t len = pci_resource_len(pdev, bar);
		unsigned long p;

		if (!len || !(pci_resource_flags(pdev, bar) & IORESOURCE_MEM))
			continue;
		for (p = PHYS_PFN(start); p < PHYS_PFN(start + len); p += PAGES_PER_SUBSECTION) {
			struct dev_pagemap *pgmap = get_dev_pagemap(p, NULL);

			if (!pgmap)
				continue;
			if (pgmap->type == MEMORY_DEVICE_PCI_P2PDMA && pgmap->nr_range == 1) {
				*pfn = PHYS_PFN(pgmap->range.start);
				*nr = PHYS_PFN(range_len(&pgmap->range));
				return pgmap;
			}
			put_dev_pagemap(pgmap);
		}
	}
	return NULL;
}

void rsrdma_p2p_put(struct dev_pagemap *pgmap)
{
	put_dev_pagemap(pgmap);
}

/*
 * Whether @dev reaches peer memory through the kernel's mapping of it: soft-RoCE, which copies
 * every payload into or out of its packets with the CPU. Not siw, the other virtual-DMA
 * device: it hands pages to the network stack as they are, for a NIC to map without P2P
 * awareness.
 */
static bool rsrdma_ib_cpu_reach(struct ib_device *dev)
{
	return ib_uses_virt_dma(dev) && dev->ops.driver_id == RDMA_DRIVER_RXE;
}

/*
 * Whether one MR of @dev is limited in scatterlist entries rather than in pages: siw checks
 * ib_alloc_mr()'s max_num_sg and the number of entries of the list it maps against its
 * max_fast_reg_page_list_len, keeps one PBL entry per entry (merging adjacent ones) whatever
 * its length, and its set_page callback records nothing (siw_alloc_mr(), siw_map_mr_sg()).
 */
bool rsrdma_ib_mr_limit_in_entries(struct ib_device *dev)
{
	return dev->ops.driver_id == RDMA_DRIVER_SIW;
}

/* Whether @dev may be given peer memory at all (see rsrdma_p2p_reach() for one provider's). */
bool rsrdma_ib_p2p_capable(struct ib_device *dev)
{
	return IS_ENABLED(CONFIG_PCI_P2PDMA) &&
	       (rsrdma_ib_cpu_reach(dev) || ib_dma_pci_p2p_dma_supported(dev));
}

/*
 * Whether @dev can reach @provider's memory: 1 by DMA (the P2P distance check passes), 2 by
 * the CPU (soft-RoCE, whose "DMA addresses" are kernel virtual addresses: peer memory is in
 * the kernel's linear map), or a negative errno. The caller says why in its own log line.
 */
int rsrdma_p2p_reach(struct ib_device *dev, struct pci_dev *provider)
{
	if (rsrdma_ib_cpu_reach(dev))
		return 2;
	if (!ib_dma_pci_p2p_dma_supported(dev))
		return -EREMOTEIO;
	return pci_p2pdma_distance(provider, dev->dma_device, false) < 0 ? -EREMOTEIO : 1;
}

/*
 * Maps @nr_pages pages of peer memory from page frame @pfn for @dev, in pieces of
 * 1 << @piece_shift bytes, into @sgt (allocated here, freed by rsrdma_p2p_unmap()). The DMA
 * API maps peer pages the P2P way (bus addresses behind a switch, or through the host bridge)
 * or fails with -EREMOTEIO.
 */
int rsrdma_p2p_map(struct ib_device *dev, struct sg_table *sgt, unsigned long pfn,
		   unsigned long nr_pages, unsigned int piece_shift)
{
	struct scatterlist *sg;
	unsigned long per;
	unsigned int i, n;
	int ret;

	if (piece_shift < PAGE_SHIFT || piece_shift > 31)
		return -EINVAL;
	per = 1UL << (piece_shift - PAGE_SHIFT);
	if (!nr_pages || nr_pages % per || nr_pages / per > UINT_MAX)
		return -EINVAL;
	n = nr_pages / per;
	ret = sg_alloc_table(sgt, n, GFP_KERNEL);
	if (ret)
		return ret;
	for_each_sgtable_sg(sgt, sg, i)
		sg_set_page(sg, pfn_to_page(pfn + i * per), 1U << piece_shift, 0);
	ret = ib_dma_map_sgtable_attrs(dev, sgt, DMA_BIDIRECTIONAL, 0);
	if (ret)
		sg_free_table(sgt);
	return ret;
}

void rsrdma_p2p_unmap(struct ib_device *dev, struct sg_table *sgt)
{
	ib_dma_unmap_sgtable_attrs(dev, sgt, DMA_BIDIRECTIONAL, 0);
	sg_free_table(sgt);
}

/* Registers (@on) or unregisters @nb for the PCI bus's device events. */
int rsrdma_pci_bus_notifier(struct notifier_block *nb, bool on)
{
	return on ? bus_register_notifier(&pci_bus_type, nb) :
		    bus_unregister_notifier(&pci_bus_type, nb);
}

/*
 * What a PCI bus event @action on device @data means for peer memory: 1 when its driver is
 * about to release the memory it published (it is being unbound, or its probe failed after
 * publishing: the cleanup that follows releases it without an unbind event), 2 when that is
 * done, the device is gone, or a driver is being bound anew, 0 otherwise. The device is
 * stored in @pdev.
 */
int rsrdma_pci_bus_event(unsigned long action, void *data, struct pci_dev **pdev)
{
	*pdev = to_pci_dev((struct device *)data);
	switch (action) {
	case BUS_NOTIFY_UNBIND_DRIVER:
	case BUS_NOTIFY_DRIVER_NOT_BOUND:
		return 1;
	case BUS_NOTIFY_UNBOUND_DRIVER:
	case BUS_NOTIFY_BIND_DRIVER:
	case BUS_NOTIFY_DEL_DEVICE:
		return 2;
	default:
		return 0;
	}
}

u16 rsrdma_nvme_cid(struct request *rq)
{
	return nvme_cid(rq);
}

struct request *rsrdma_tag_to_rq(struct blk_mq_tags *tags, unsigned int tag)
{
	return blk_mq_tag_to_rq(tags, tag);
}

struct request *rsrdma_nvme_find_rq(struct blk_mq_tags *tags, u16 command_id)
{
	return nvme_find_rq(tags, command_id);
}

bool rsrdma_nvme_try_complete_req(struct request *rq, __le16 status, __le64 result)
{
	union nvme_result res = { .u64 = result };

	return nvme_try_complete_req(rq, status, res);
}

bool rsrdma_nvme_check_ready(struct nvme_ctrl *ctrl, struct request *rq, bool queue_live)
{
	return nvme_check_ready(ctrl, rq, queue_live);
}

void rsrdma_nvme_start_request(struct request *rq)
{
	nvme_start_request(rq);
}

int rsrdma_nvme_ctrl_state(struct nvme_ctrl *ctrl)
{
	return nvme_ctrl_state(ctrl);
}

void rsrdma_nvme_get_ctrl(struct nvme_ctrl *ctrl)
{
	nvme_get_ctrl(ctrl);
}

void rsrdma_nvme_put_ctrl(struct nvme_ctrl *ctrl)
{
	nvme_put_ctrl(ctrl);
}

const char *rsrdma_nvmf_ctrl_subsysnqn(struct nvme_ctrl *ctrl)
{
	return nvmf_ctrl_subsysnqn(ctrl);
}

const char *rsrdma_nvme_ctrl_name(struct nvme_ctrl *ctrl)
{
	return dev_name(ctrl->device);
}

/* A reference to @ctrl unless it is already being freed. */
bool rsrdma_nvme_tryget_ctrl(struct nvme_ctrl *ctrl)
{
	return !!kobject_get_unless_zero(&ctrl->device->kobj);
}

void rsrdma_nvme_auth_stop(struct nvme_ctrl *ctrl)
{
	nvme_auth_stop(ctrl);
}

/* Sets trsvcid when the user gave none, as the C rdma transport does (freed with the options). */
int rsrdma_opts_default_trsvcid(struct nvmf_ctrl_options *opts, const char *trsvcid)
{
	if (opts->mask & NVMF_OPT_TRSVCID)
		return 0;
	opts->trsvcid = kstrdup(trsvcid, GFP_KERNEL);
	if (!opts->trsvcid)
		return -ENOMEM;
	opts->mask |= NVMF_OPT_TRSVCID;
	return 0;
}

void rsrdma_set_io_timeout(struct request_queue *q, unsigned int timeout_ms)
{
	blk_queue_rq_timeout(q, msecs_to_jiffies(timeout_ms));
}

int rsrdma_parse_addr(const char *addr, const char *port, struct __kernel_sockaddr_storage *out)
{
	return inet_pton_with_scope(&init_net, AF_UNSPEC, addr, port, out);
}

/*
 * Whether module @name is loaded or built in: it has a /sys/module entry. The module list itself
 * (find_module) is not exported to modules.
 */
bool rsrdma_module_present(const char *name)
{
	char path[64];
	struct path p;

	if (snprintf(path, sizeof(path), "/sys/module/%s", name) >= sizeof(path))
		return false;
	if (kern_path(path, LOOKUP_FOLLOW, &p))
		return false;
	path_put(&p);
	return true;
}

unsigned int rsrdma_num_online_cpus(void)
{
	return num_online_cpus();
}

void rsrdma_nvmf_complete_timed_out_request(struct request *rq)
{
	nvmf_complete_timed_out_request(rq);
}

/* RDMA CM and verbs ---------------------------------------------------------------------- */

struct rdma_cm_id *rsrdma_create_id(rdma_cm_event_handler handler, void *context)
{
	return rdma_create_id(&init_net, handler, context, RDMA_PS_TCP, IB_QPT_RC);
}

struct ib_pd *rsrdma_alloc_pd(struct ib_device *dev)
{
	return ib_alloc_pd(dev, 0);
}

void rsrdma_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

struct ib_cq *rsrdma_alloc_cq(struct ib_device *dev, void *priv, int nr_cqe, int comp_vector,
			      enum ib_poll_context poll_ctx)
{
	return ib_alloc_cq(dev, priv, nr_cqe, comp_vector, poll_ctx);
}

struct ib_cq *rsrdma_create_cq(struct ib_device *dev, ib_comp_handler handler, void *ctx,
			       int nr_cqe, int comp_vector)
{
	struct ib_cq_init_attr attr = { .cqe = nr_cqe, .comp_vector = comp_vector };

	return ib_create_cq(dev, handler, NULL, ctx, &attr);
}

int rsrdma_destroy_cq(struct ib_cq *cq)
{
	int ret = ib_destroy_cq_user(cq, NULL);

	WARN_ONCE(ret, "nvme_rsrdma: destroying a CQ failed (%d)\n", ret);
	return ret;
}

int rsrdma_arm_cq(struct ib_cq *cq)
{
	return ib_req_notify_cq(cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS);
}

void rsrdma_init_irq_work(struct irq_work *work, void (*func)(struct irq_work *))
{
	init_irq_work(work, func);
}

bool rsrdma_in_interrupt(void)
{
	return in_interrupt();
}

int rsrdma_post_send(struct ib_qp *qp, const struct ib_send_wr *wr)
{
	return ib_post_send(qp, wr, NULL);
}

int rsrdma_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr)
{
	return ib_post_recv(qp, wr, NULL);
}

int rsrdma_dereg_mr(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
}

u32 rsrdma_inc_rkey(u32 rkey)
{
	return ib_inc_rkey(rkey);
}

void rsrdma_update_fast_reg_key(struct ib_mr *mr, u8 newkey)
{
	ib_update_fast_reg_key(mr, newkey);
}

bool rsrdma_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

int rsrdma_ibdev_to_node(struct ib_device *dev)
{
	return ibdev_to_node(dev);
}

/*
 * Whether the network device under RoCE port @port of @dev is running with carrier, the rule
 * soft-RoCE sets its port state by. The core's cached port state follows only once the
 * provider has handled the netdev's event, and a netdev that is being stopped already fails
 * sends (its routes are gone) before that. True for a port without a netdev.
 */
bool rsrdma_port_netdev_up(struct ib_device *dev, u32 port)
{
	struct net_device *ndev = ib_device_get_netdev(dev, port);
	bool up;

	if (!ndev)
		return true;
	up = netif_running(ndev) && netif_carrier_ok(ndev);
	dev_put(ndev);
	return up;
}

/*
 * The ports of @dev that are not active, as its driver reports them now (the core's cache
 * catches up only when the event it queued runs): bit N for port N, ports from 64 up left out.
 */
u64 rsrdma_ports_down(struct ib_device *dev)
{
	struct ib_port_attr attr;
	u64 down = 0;
	u32 port;

	rdma_for_each_port(dev, port) {
		if (port >= 64)
			break;
		if (ib_query_port(dev, port, &attr) || attr.state != IB_PORT_ACTIVE)
			down |= BIT_ULL(port);
	}
	return down;
}

const char *rsrdma_ibdev_name(struct ib_device *dev)
{
	return dev_name(&dev->dev);
}

u64 rsrdma_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size,
			  enum dma_data_direction dir)
{
	return ib_dma_map_single(dev, cpu_addr, size, dir);
}

int rsrdma_dma_mapping_error(struct ib_device *dev, u64 dma_addr)
{
	return ib_dma_mapping_error(dev, dma_addr);
}

u64 rsrdma_dma_map_page(struct ib_device *dev, struct page *page, u32 offset, u32 size,
			enum dma_data_direction dir)
{
	return ib_dma_map_page(dev, page, offset, size, dir);
}

/* The largest single mapping the device takes (software devices map virtual addresses). */
size_t rsrdma_dma_max_mapping_size(struct ib_device *dev)
{
	if (ib_uses_virt_dma(dev))
		return SIZE_MAX;
	return dma_max_mapping_size(dev->dma_device);
}

void rsrdma_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size,
			     enum dma_data_direction dir)
{
	ib_dma_unmap_single(dev, addr, size, dir);
}

void rsrdma_dma_sync_for_cpu(struct ib_device *dev, u64 addr, size_t size,
			     enum dma_data_direction dir)
{
	ib_dma_sync_single_for_cpu(dev, addr, size, dir);
}

void rsrdma_dma_sync_for_device(struct ib_device *dev, u64 addr, size_t size,
				enum dma_data_direction dir)
{
	ib_dma_sync_single_for_device(dev, addr, size, dir);
}

int rsrdma_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
		      enum dma_data_direction dir)
{
	return ib_dma_map_sg(dev, sg, nents, dir);
}

void rsrdma_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			 enum dma_data_direction dir)
{
	ib_dma_unmap_sg(dev, sg, nents, dir);
}

void rsrdma_dma_sync_sg_for_cpu(struct ib_device *dev, struct scatterlist *sg, int nents,
				enum dma_data_direction dir)
{
	if (!ib_uses_virt_dma(dev))
		dma_sync_sg_for_cpu(dev->dma_device, sg, nents, dir);
}

void rsrdma_dma_sync_sg_for_device(struct ib_device *dev, struct scatterlist *sg, int nents,
				   enum dma_data_direction dir)
{
	if (!ib_uses_virt_dma(dev))
		dma_sync_sg_for_device(dev->dma_device, sg, nents, dir);
}

void rsrdma_sg_set_buf(struct scatterlist *sg, const void *buf, unsigned int len)
{
	sg_set_buf(sg, buf, len);
}

struct scatterlist *rsrdma_sg_next(struct scatterlist *sg)
{
	return sg_next(sg);
}

void rsrdma_sg_set_dma(struct scatterlist *sg, u64 dma_addr, unsigned int len)
{
	sg_dma_address(sg) = dma_addr;
	sg_dma_len(sg) = len;
}

/* Interrupt-safe spinlock ---------------------------------------------------------------- */

/* As the kernel crate's helper for its SpinLock: a lockdep class per Rust call site. */
void rsrdma_spin_lock_init(spinlock_t *lock, const char *name, struct lock_class_key *key)
{
#ifdef CONFIG_DEBUG_SPINLOCK
# if defined(CONFIG_PREEMPT_RT)
	__spin_lock_init(lock, name, key, false);
# else
	__raw_spin_lock_init(spinlock_check(lock), name, key, LD_WAIT_CONFIG);
# endif
#else
	spin_lock_init(lock);
#endif
}

unsigned long rsrdma_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

void rsrdma_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}

/* RCU ------------------------------------------------------------------------------------ */

void rsrdma_rcu_read_lock(void)
{
	rcu_read_lock();
}

void rsrdma_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

unsigned long rsrdma_rcu_get_state(void)
{
	return get_state_synchronize_rcu();
}

void rsrdma_cond_synchronize_rcu(unsigned long cookie)
{
	cond_synchronize_rcu(cookie);
}

/* debugfs -------------------------------------------------------------------------------- */

struct dentry *rsrdma_debugfs_dir(const char *name, struct dentry *parent)
{
	return debugfs_create_dir(name, parent);
}

static int rsrdma_show(struct seq_file *m, void *unused)
{
	struct rsrdma_show_file *file = m->private;

	return file->show(m, file);
}
DEFINE_SHOW_ATTRIBUTE(rsrdma);

struct dentry *rsrdma_debugfs_show_file(const char *name, struct dentry *parent,
					struct rsrdma_show_file *file)
{
	return debugfs_create_file(name, 0444, parent, file, &rsrdma_fops);
}

/* Waits for readers of the files below @dentry to finish. */
void rsrdma_debugfs_remove(struct dentry *dentry)
{
	debugfs_remove(dentry);
}

void rsrdma_seq_puts(struct seq_file *m, const char *s)
{
	seq_puts(m, s);
}

/* Memory, work items, completions -------------------------------------------------------- */

void *rsrdma_alloc_chunk(unsigned int order, int node)
{
	struct page *page;

	page = alloc_pages_node(node, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN | __GFP_COMP, order);
	return page ? page_address(page) : NULL;
}

unsigned long rsrdma_virt_to_pfn(const void *va)
{
	return page_to_pfn(virt_to_page(va));
}

void rsrdma_free_chunk(void *addr, unsigned int order)
{
	free_pages((unsigned long)addr, order);
}

/*
 * As INIT_WORK, with the lockdep class a Rust caller gives (one per kind of item, as INIT_WORK
 * at distinct call sites would give), so that flushing one kind from another is not reported
 * as recursion.
 */
void rsrdma_init_work(struct work_struct *work, work_func_t fn, const char *name,
		      struct lock_class_key *key)
{
	__init_work(work, 0);
	work->data = (atomic_long_t)WORK_DATA_INIT();
#ifdef CONFIG_LOCKDEP
	lockdep_init_map(&work->lockdep_map, name, key, 0);
#endif
	INIT_LIST_HEAD(&work->entry);
	work->func = fn;
}

void rsrdma_init_delayed_work(struct delayed_work *dwork, work_func_t fn, const char *name,
			      struct lock_class_key *key)
{
	rsrdma_init_work(&dwork->work, fn, name, key);
	__init_timer(&dwork->timer, delayed_work_timer_fn, TIMER_IRQSAFE);
}

bool rsrdma_queue_work(struct workqueue_struct *wq, struct work_struct *work)
{
	return queue_work(wq, work);
}

bool rsrdma_queue_delayed_work(struct workqueue_struct *wq, struct delayed_work *dwork,
			       unsigned int delay_ms)
{
	return queue_delayed_work(wq, dwork, msecs_to_jiffies(delay_ms));
}

void rsrdma_init_completion(struct completion *c)
{
	init_completion(c);
}

void rsrdma_reinit_completion(struct completion *c)
{
	reinit_completion(c);
}

long rsrdma_wait_for_completion_ms(struct completion *c, unsigned int timeout_ms)
{
	return wait_for_completion_timeout(c, msecs_to_jiffies(timeout_ms));
}

void rsrdma_flush_workqueue(struct workqueue_struct *wq)
{
	flush_workqueue(wq);
}

/* Mapping devices ------------------------------------------------------------------------- */

static int rsrdma_map_open(struct inode *inode, struct file *file)
{
	/* misc_open() set private_data to the miscdevice, and holds misc_mtx over this call. */
	struct rsrdma_map_dev *dev = container_of(file->private_data, struct rsrdma_map_dev, misc);

	file->private_data = dev->get(dev);
	return 0;
}

static int rsrdma_map_release(struct inode *inode, struct file *file)
{
	struct rsrdma_map_file *f = file->private_data;

	f->put(f);
	return 0;
}

static int rsrdma_map_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct rsrdma_map_file *f = file->private_data;

	return f->mmap(f, vma);
}

static const struct file_operations rsrdma_map_fops = {
	.owner = THIS_MODULE,
	.open = rsrdma_map_open,
	.release = rsrdma_map_release,
	.mmap = rsrdma_map_mmap,
	.llseek = noop_llseek,
};

int rsrdma_map_dev_register(struct rsrdma_map_dev *dev, const char *name, const char *nodename)
{
	dev->misc.minor = MISC_DYNAMIC_MINOR;
	dev->misc.name = name;
	dev->misc.nodename = nodename;
	dev->misc.mode = 0600;
	dev->misc.fops = &rsrdma_map_fops;
	return misc_register(&dev->misc);
}

void rsrdma_map_dev_deregister(struct rsrdma_map_dev *dev)
{
	misc_deregister(&dev->misc);
}

void rsrdma_vma_info(struct vm_area_struct *vma, unsigned long *start, u64 *pgoff, u64 *len,
		     bool *shared, bool *exec)
{
	*start = vma->vm_start;
	*pgoff = vma->vm_pgoff;
	*len = vma->vm_end - vma->vm_start;
	*shared = vma->vm_flags & VM_SHARED;
	*exec = vma->vm_flags & VM_EXEC;
}

void rsrdma_vma_prepare(struct vm_area_struct *vma)
{
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	vm_flags_clear(vma, VM_MAYEXEC);
}

int rsrdma_vma_insert(struct vm_area_struct *vma, unsigned long uaddr, void *va, unsigned long len)
{
	unsigned long done;
	int ret;

	for (done = 0; done < len; done += PAGE_SIZE) {
		ret = vm_insert_page(vma, uaddr + done, virt_to_page(va + done));
		if (ret)
			return ret;
	}
	return 0;
}
