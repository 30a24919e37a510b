/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C glue of nvme_rsrdma: what the Rust side cannot express in 6.12.
 *
 * - module parameters (6.12's Rust module! has none);
 * - dynamic debug and device-prefixed log call sites (6.12's pr_debug! is compiled out); the
 *   Rust side formats the line and passes it as a string;
 * - wrappers for static inline functions and function-like macros of the NVMe, blk-mq and
 *   RDMA headers.
 *
 * Nothing here has transport logic.
 */
#ifndef RSRDMA_GLUE_H
#define RSRDMA_GLUE_H

#include <linux/blk-mq.h>
#include <linux/completion.h>
#include <linux/miscdevice.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

struct nvme_ctrl;

/* Module parameters. */
extern bool rsrdma_dropin;
extern unsigned int rsrdma_slot_kib;
extern unsigned int rsrdma_io_pool_mib;
extern unsigned int rsrdma_spread_kib;
extern unsigned int rsrdma_min_io_queues;
extern unsigned int rsrdma_area_mib;

/* Logging. level is one of the RSRDMA_LOG_* values; ctrl may be NULL. */
enum rsrdma_log_level {
	RSRDMA_LOG_ERR,
	RSRDMA_LOG_WARN,
	RSRDMA_LOG_INFO,
	RSRDMA_LOG_ERR_RATELIMITED,
};

void rsrdma_log(const struct nvme_ctrl *ctrl, enum rsrdma_log_level level, const char *msg);

/*
 * Dynamic debug classes, one call site each: enable with e.g. "func rsrdma_dbg_cm +p".
 * A NULL msg asks whether the class is enabled.
 */
bool rsrdma_dbg_cm(const struct nvme_ctrl *ctrl, const char *msg);
bool rsrdma_dbg_queue(const struct nvme_ctrl *ctrl, const char *msg);
bool rsrdma_dbg_pool(const struct nvme_ctrl *ctrl, const char *msg);
bool rsrdma_dbg_io(const struct nvme_ctrl *ctrl, const char *msg);
bool rsrdma_dbg_recovery(const struct nvme_ctrl *ctrl, const char *msg);

/* blk-mq and NVMe core inlines. */
void *rsrdma_rq_pdu(struct request *rq);
struct request *rsrdma_rq_from_pdu(void *pdu);
unsigned int rsrdma_rq_payload_bytes(struct request *rq);
bool rsrdma_rq_is_write(struct request *rq);
unsigned short rsrdma_rq_nr_phys_segments(struct request *rq);
typedef int (*rsrdma_segment_fn)(void *ctx, void *va, unsigned int len);
int rsrdma_rq_visit_segments(struct request *rq, rsrdma_segment_fn fn, void *ctx);
unsigned int rsrdma_rq_bvecs(struct request *rq, struct bio_vec *bv, unsigned int max);
typedef int (*rsrdma_pfn_fn)(void *ctx, unsigned long pfn, unsigned int offset, unsigned int len);
int rsrdma_rq_visit_bvecs(struct request *rq, rsrdma_pfn_fn fn, void *ctx);
int rsrdma_rq_p2p(struct request *rq);

/* PCI peer-to-peer memory (P2PDMA), see rust/wrap/devmem.rs. */
struct dev_pagemap;
struct pci_dev;
struct sg_table;
struct pci_dev *rsrdma_pci_next(struct pci_dev *from);
struct pci_dev *rsrdma_pci_dev_get(struct pci_dev *pdev);
void rsrdma_pci_dev_put(struct pci_dev *pdev);
bool rsrdma_ib_p2p_capable(struct ib_device *dev);
bool rsrdma_ib_mr_limit_in_entries(struct ib_device *dev);
const char *rsrdma_pci_name(struct pci_dev *pdev);
struct dev_pagemap *rsrdma_p2p_get(struct pci_dev *pdev, unsigned long *pfn, unsigned long *nr);
void rsrdma_p2p_put(struct dev_pagemap *pgmap);
int rsrdma_p2p_reach(struct ib_device *dev, struct pci_dev *provider);
int rsrdma_p2p_map(struct ib_device *dev, struct sg_table *sgt, unsigned long pfn,
		   unsigned long nr_pages, unsigned int piece_shift);
void rsrdma_p2p_unmap(struct ib_device *dev, struct sg_table *sgt);
struct notifier_block;
int rsrdma_pci_bus_notifier(struct notifier_block *nb, bool on);
int rsrdma_pci_bus_event(unsigned long action, void *data, struct pci_dev **pdev);
u16 rsrdma_nvme_cid(struct request *rq);
struct request *rsrdma_tag_to_rq(struct blk_mq_tags *tags, unsigned int tag);
struct request *rsrdma_nvme_find_rq(struct blk_mq_tags *tags, u16 command_id);
bool rsrdma_nvme_try_complete_req(struct request *rq, __le16 status, __le64 result);
bool rsrdma_nvme_check_ready(struct nvme_ctrl *ctrl, struct request *rq, bool queue_live);
void rsrdma_nvme_start_request(struct request *rq);
int rsrdma_nvme_ctrl_state(struct nvme_ctrl *ctrl);
void rsrdma_nvme_get_ctrl(struct nvme_ctrl *ctrl);
void rsrdma_nvme_put_ctrl(struct nvme_ctrl *ctrl);
const char *rsrdma_nvmf_ctrl_subsysnqn(struct nvme_ctrl *ctrl);
const char *rsrdma_nvme_ctrl_name(struct nvme_ctrl *ctrl);
bool rsrdma_nvme_tryget_ctrl(struct nvme_ctrl *ctrl);
void rsrdma_nvme_auth_stop(struct nvme_ctrl *ctrl);
int rsrdma_opts_default_trsvcid(struct nvmf_ctrl_options *opts, const char *trsvcid);
void rsrdma_set_io_timeout(struct request_queue *q, unsigned int timeout_ms);
int rsrdma_parse_addr(const char *addr, const char *port, struct __kernel_sockaddr_storage *out);
unsigned int rsrdma_num_online_cpus(void);
bool rsrdma_module_present(const char *name);
void rsrdma_nvmf_complete_timed_out_request(struct request *rq);

/* RDMA CM and verbs macros and inlines. */
struct rdma_cm_id *rsrdma_create_id(rdma_cm_event_handler handler, void *context);
struct ib_pd *rsrdma_alloc_pd(struct ib_device *dev);
void rsrdma_dealloc_pd(struct ib_pd *pd);
struct ib_cq *rsrdma_alloc_cq(struct ib_device *dev, void *priv, int nr_cqe, int comp_vector,
			      enum ib_poll_context poll_ctx);
struct ib_cq *rsrdma_create_cq(struct ib_device *dev, ib_comp_handler handler, void *ctx,
			       int nr_cqe, int comp_vector);
int rsrdma_destroy_cq(struct ib_cq *cq);
int rsrdma_arm_cq(struct ib_cq *cq);
struct irq_work;
void rsrdma_init_irq_work(struct irq_work *work, void (*func)(struct irq_work *));
/* Whether a softirq raised now runs without waking ksoftirqd (interrupt or BH-off context). */
bool rsrdma_in_interrupt(void);
int rsrdma_post_send(struct ib_qp *qp, const struct ib_send_wr *wr);
int rsrdma_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr);
int rsrdma_dereg_mr(struct ib_mr *mr);
u32 rsrdma_inc_rkey(u32 rkey);
void rsrdma_update_fast_reg_key(struct ib_mr *mr, u8 newkey);
int rsrdma_ibdev_to_node(struct ib_device *dev);
bool rsrdma_ib_device_try_get(struct ib_device *dev);
bool rsrdma_port_netdev_up(struct ib_device *dev, u32 port);
u64 rsrdma_ports_down(struct ib_device *dev);
const char *rsrdma_ibdev_name(struct ib_device *dev);
u64 rsrdma_dma_map_single(struct ib_device *dev, void *cpu_addr, size_t size,
			  enum dma_data_direction dir);
int rsrdma_dma_mapping_error(struct ib_device *dev, u64 dma_addr);
u64 rsrdma_dma_map_page(struct ib_device *dev, struct page *page, u32 offset, u32 size,
			enum dma_data_direction dir);
size_t rsrdma_dma_max_mapping_size(struct ib_device *dev);
void rsrdma_dma_unmap_single(struct ib_device *dev, u64 addr, size_t size,
			     enum dma_data_direction dir);
void rsrdma_dma_sync_for_cpu(struct ib_device *dev, u64 addr, size_t size,
			     enum dma_data_direction dir);
void rsrdma_dma_sync_for_device(struct ib_device *dev, u64 addr, size_t size,
				enum dma_data_direction dir);
int rsrdma_dma_map_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
		      enum dma_data_direction dir);
void rsrdma_dma_unmap_sg(struct ib_device *dev, struct scatterlist *sg, int nents,
			 enum dma_data_direction dir);
void rsrdma_dma_sync_sg_for_cpu(struct ib_device *dev, struct scatterlist *sg, int nents,
				enum dma_data_direction dir);
void rsrdma_dma_sync_sg_for_device(struct ib_device *dev, struct scatterlist *sg, int nents,
				   enum dma_data_direction dir);
void rsrdma_sg_set_buf(struct scatterlist *sg, const void *buf, unsigned int len);
struct scatterlist *rsrdma_sg_next(struct scatterlist *sg);
void rsrdma_sg_set_dma(struct scatterlist *sg, u64 dma_addr, unsigned int len);

/* An interrupt-safe spinlock: 6.12's Rust SpinLock has no irqsave variant. */
void rsrdma_spin_lock_init(spinlock_t *lock, const char *name, struct lock_class_key *key);
unsigned long rsrdma_spin_lock_irqsave(spinlock_t *lock);
void rsrdma_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags);

/* RCU read-side critical sections: 6.12's kernel crate has no RCU. */
void rsrdma_rcu_read_lock(void);
void rsrdma_rcu_read_unlock(void);
/* A grace period since the state the cookie was taken in (RCU's polled grace periods). */
unsigned long rsrdma_rcu_get_state(void);
void rsrdma_cond_synchronize_rcu(unsigned long cookie);

/*
 * debugfs: directories, and read-only files whose content a Rust show function writes through
 * rsrdma_seq_puts(). The file's private data is the rsrdma_show_file (first member of a Rust
 * object), passed back to its show function.
 */
struct dentry;
struct seq_file;
struct rsrdma_show_file {
	int (*show)(struct seq_file *m, struct rsrdma_show_file *file);
};

struct dentry *rsrdma_debugfs_dir(const char *name, struct dentry *parent);
struct dentry *rsrdma_debugfs_show_file(const char *name, struct dentry *parent,
					struct rsrdma_show_file *file);
void rsrdma_debugfs_remove(struct dentry *dentry);
void rsrdma_seq_puts(struct seq_file *m, const char *s);

/* Memory, work items, completions. */
void *rsrdma_alloc_chunk(unsigned int order, int node);
unsigned long rsrdma_virt_to_pfn(const void *va);
void rsrdma_free_chunk(void *addr, unsigned int order);
/* Work items, in the lockdep class the caller gives (a static key and its name). */
void rsrdma_init_work(struct work_struct *work, work_func_t fn, const char *name,
		      struct lock_class_key *key);
void rsrdma_init_delayed_work(struct delayed_work *dwork, work_func_t fn, const char *name,
			      struct lock_class_key *key);
bool rsrdma_queue_work(struct workqueue_struct *wq, struct work_struct *work);
bool rsrdma_queue_delayed_work(struct workqueue_struct *wq, struct delayed_work *dwork,
			       unsigned int delay_ms);
void rsrdma_init_completion(struct completion *c);
void rsrdma_reinit_completion(struct completion *c);
long rsrdma_wait_for_completion_ms(struct completion *c, unsigned int timeout_ms);
void rsrdma_flush_workqueue(struct workqueue_struct *wq);

/*
 * A character device (misc device) whose file maps memory of a Rust object into processes.
 * Opening it calls @get, which returns the object the file then holds (its first member, a
 * struct rsrdma_map_file); mmap and release call the file's functions. The fops' owner is this module, so it stays loaded while a file is open
 * or mapped.
 */
struct vm_area_struct;
struct rsrdma_map_file {
	void (*put)(struct rsrdma_map_file *f);
	int (*mmap)(struct rsrdma_map_file *f, struct vm_area_struct *vma);
};

struct rsrdma_map_dev {
	struct miscdevice misc;
	struct rsrdma_map_file *(*get)(struct rsrdma_map_dev *dev);
};

int rsrdma_map_dev_register(struct rsrdma_map_dev *dev, const char *name, const char *nodename);
void rsrdma_map_dev_deregister(struct rsrdma_map_dev *dev);
/* The VMA's start, offset in pages (vm_pgoff), length, and whether it is shared and executable. */
void rsrdma_vma_info(struct vm_area_struct *vma, unsigned long *start, u64 *pgoff, u64 *len,
		     bool *shared, bool *exec);
/* Marks the VMA fixed in size, out of core dumps and never executable. */
void rsrdma_vma_prepare(struct vm_area_struct *vma);
/* Inserts the pages of @len bytes of kernel memory at @va into the VMA at @uaddr. */
int rsrdma_vma_insert(struct vm_area_struct *vma, unsigned long uaddr, void *va, unsigned long len);

#endif /* RSRDMA_GLUE_H */
