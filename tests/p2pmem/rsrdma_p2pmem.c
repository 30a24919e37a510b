// SPDX-License-Identifier: GPL-2.0
/*
 * rsrdma_p2pmem: a test-only provider of PCI peer-to-peer memory for nvme-rsrdma's guest.
 *
 * It binds to QEMU's ivshmem-plain device (a PCI device whose BAR 2 is host RAM) and
 * publishes that BAR as p2pmem, the way the NVMe PCI driver publishes a controller memory
 * buffer: processes map it from /sys/bus/pci/devices/<bdf>/p2pmem/allocate. It stands in for
 * accelerator memory where the emulated CMB cannot: the CMB is emulated MMIO, which the
 * guest's CPU (soft-RoCE copies packets with it) reaches one access at a time, while this BAR
 * is RAM the CPU reads and writes at memory speed, as a real NIC's DMA would reach real
 * device memory. Not for anything but the project's tests and benchmark.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>

#define IVSHMEM_VENDOR	0x1af4
#define IVSHMEM_DEVICE	0x1110
#define IVSHMEM_BAR	2

static int rsrdma_p2pmem_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret;

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	if (!(pci_resource_flags(pdev, IVSHMEM_BAR) & IORESOURCE_MEM) ||
	    !pci_resource_len(pdev, IVSHMEM_BAR))
		return -ENODEV;
	ret = pci_p2pdma_add_resource(pdev, IVSHMEM_BAR, 0, 0);
	if (ret) {
		pci_err(pdev, "p2pmem: cannot add BAR %d: %d\n", IVSHMEM_BAR, ret);
		return ret;
	}
	pci_p2pmem_publish(pdev, true);
	pci_info(pdev, "p2pmem: %llu MiB of BAR %d published (test provider)\n",
		 (unsigned long long)pci_resource_len(pdev, IVSHMEM_BAR) >> 20, IVSHMEM_BAR);
	return 0;
}

static void rsrdma_p2pmem_remove(struct pci_dev *pdev)
{
	/* The memory goes with the device's managed resources, once its users let it go. */
	pci_p2pmem_publish(pdev, false);
}

static const struct pci_device_id rsrdma_p2pmem_ids[] = {
	{ PCI_DEVICE(IVSHMEM_VENDOR, IVSHMEM_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rsrdma_p2pmem_ids);

static struct pci_driver rsrdma_p2pmem_driver = {
	.name = "rsrdma_p2pmem",
	.id_table = rsrdma_p2pmem_ids,
	.probe = rsrdma_p2pmem_probe,
	.remove = rsrdma_p2pmem_remove,
};
module_pci_driver(rsrdma_p2pmem_driver);

MODULE_DESCRIPTION("nvme-rsrdma tests: ivshmem BAR published as PCI peer-to-peer memory");
MODULE_LICENSE("GPL");
