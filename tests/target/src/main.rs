// SPDX-License-Identifier: GPL-2.0

//! rsrdma-target: a small NVMe-over-RDMA target for the nvme-rsrdma tests, serving one
//! memory-backed namespace, that can misbehave on command (`--mode`). See `usage()`.

mod dev;
mod ffi;
mod nvme;
mod raw;
mod target;

use raw::{RawConfig, RawOp};
use target::{Config, Mode};

fn usage() -> ! {
    eprint!(
        "\
usage: rsrdma-target [options]

Serves one NVMe subsystem with one memory-backed namespace (512-byte blocks) over RDMA
(librdmacm/libibverbs), politely or with one misbehaviour (--mode) that is applied once.

  -a, --addr ADDR          IPv4 address to listen on (10.0.2.15)
  -p, --port PORT          port (4421)
  -n, --nqn NQN            subsystem NQN (nqn.2026-11.io.rsrdma:hostile)
  -s, --size MIB           namespace size in MiB (64)
      --mdts-kib KIB       maximum data transfer size, a power of two >= 4, or 0 for no
                           limit (8192)
      --inline BYTES       in-capsule data size of the I/O queues, 0 for none (8192)
      --queue-size N       largest I/O queue (CAP.MQES + 1) (128)
      --max-io-queues N    I/O queues granted at most (8)
      --mode MODE          misbehaviour, applied once (polite)
      --after-reconnect    for the connect modes: serve politely, close the association at
                           the first I/O command once armed, and misbehave on the reconnect
      --persist            connect-host-denied and connect-no-subsys: refuse every Connect
                           once active, not only the first
      --arm now|signal     when the I/O modes (and --after-reconnect) become active: at once,
                           or at the first SIGUSR1 (now)
      --mid-min BYTES      close-mid-transfer: smallest transfer it applies to (1048576)
  -v, --verbose            log every command and completion to stderr

Raw bandwidth instead of a target (the benchmark's ceiling):
      --raw-bw write|read  connect --qps queue pairs to itself at ADDR:PORT and keep
                           --depth RDMA WRITEs (or READs) of --msg-bytes each in flight on
                           each for --seconds after a second of warm-up, sleeping on the
                           completion channel; prints one line with the MiB/s
      --qps N (1)  --depth N (2)  --msg-bytes B (4194304)  --seconds S (5)

Modes:
  polite                   no misbehaviour
  reject:N[@io]            reject the CM connect of the admin (or first I/O) queue with
                           NVMe/RDMA reject status N (1..9)
  connect-hang[@io]        accept, then never answer the Fabrics Connect
  connect-drop[@io]        accept, then close the connection instead of answering the
                           Fabrics Connect
  connect-inv[@io]         answer the Fabrics Connect with SEND_WITH_INV naming an RKEY the
                           host never registered (its receive fails; the connection stays)
  connect-error[@io]       fail the Connect with 'controller busy' (0x181), without DNR
  connect-error-dnr[@io]   the same with DNR set
  connect-host-denied[@io] fail the Connect with 'invalid host' (0x184) and DNR, as nvmet does
                           for a host not (yet) allowed on the subsystem
  connect-no-subsys[@io]   fail the Connect with 'invalid parameter' (0x182), naming the
                           subsystem NQN, and DNR, as nvmet does for an unknown subsystem
  bad-accept:LIE[@io]      accept the CM connect with unusual private data: LIE recfmt
                           (record format 1), crqsize (a receive queue of half the host's
                           send queue; the queue reports the most commands outstanding at
                           once when it closes) or short (2 bytes, which RoCE pads with
                           zeroes)
  bad-cid                  answer an I/O command with a wrong command_id (generation bits)
  dup-cqe                  send the completion of an I/O command twice
  short-recv[:N]           send only N (8) bytes as the response of an I/O command
  stray-cqe                send a completion for a command the host never sent
  send-inv[:pool]          answer with SEND_WITH_INV naming a wrong RKEY (or, with :pool,
                           the host's own RKEY, which it never offered for invalidation)
  no-complete              never complete one I/O command
  late-cqe                 hold one I/O command and close the association; answer that
                           command on the host's next association, on the same qid, right
                           after its Connect (the host has the command cancelled by then)
  close-mid-transfer       close the association in the middle of a large transfer
  late-keepalive[:MS]      answer a keep-alive MS ms late (default: KATO + 3 s)
  stale-rkey               record an RKEY, close the association, and on the new one try
                           with the old RKEY the RDMA READ (of a write's buffer) or WRITE (of
                           a read's) it was given for (reported as 'stale-rkey result: ...')
  scope:read-dest          RDMA READ of the buffer of a host read (the target's to write)
                           with its own RKEY (reported as 'scope result: ...')
  scope:write-src          RDMA WRITE into the buffer of a host write (the target's to read)
                           with its own RKEY (reported as 'scope result: ...')
  residue                  record the buffers of the host's writes; at the first write of the
                           host's next association, RDMA READ those buffers with the new RKEY
                           and compare them with what they held (reported as
                           'residue result: ...')
  io-error                 answer an I/O command with a media error and DNR (unrecovered
                           read error 0x281 for a read, write fault 0x280 for a write)
  no-io-queues             answer Set Features (Number of Queues) with 'invalid field' and
                           DNR: no I/O queue granted (on the first association)
  long-rsp[:N]             send N (17..64, default 64) bytes, more than a completion, as the
                           response of an I/O command (its remainder zeroes)
  qp-error                 hold an I/O command and move the queue's QP to the error state,
                           without a disconnect: the host's sends go unanswered
  aen-flood[:N]            at an I/O command, complete the held Asynchronous Event Request N
                           (1..64, default 16) times in a row, each a 'namespace attribute
                           changed' notice (not before the host has sent one)

Output: one line per connection, queue, controller and misbehaviour on stdout; with -v one
line per command on stderr.
"
    );
    std::process::exit(2)
}

fn parse_args() -> (Config, Option<RawConfig>) {
    let mut cfg = Config::default();
    let mut raw = RawConfig {
        addr: String::new(),
        port: 0,
        op: RawOp::Write,
        qps: 1,
        msg_bytes: 4 << 20,
        depth: 2,
        seconds: 5,
    };
    let mut raw_on = false;
    let mut args = std::env::args().skip(1);
    let value = |args: &mut dyn Iterator<Item = String>, name: &str| -> String {
        args.next().unwrap_or_else(|| {
            eprintln!("rsrdma-target: {name} needs a value");
            usage()
        })
    };
    fn num<T: std::str::FromStr>(s: &str, name: &str) -> T {
        s.parse().unwrap_or_else(|_| {
            eprintln!("rsrdma-target: bad value '{s}' for {name}");
            usage()
        })
    }
    while let Some(a) = args.next() {
        match a.as_str() {
            "-a" | "--addr" => cfg.addr = value(&mut args, &a),
            "-p" | "--port" => cfg.port = num(&value(&mut args, &a), &a),
            "-n" | "--nqn" => cfg.nqn = value(&mut args, &a),
            "-s" | "--size" => cfg.size = num::<u64>(&value(&mut args, &a), &a) << 20,
            "--mdts-kib" => {
                let kib: u32 = num(&value(&mut args, &a), &a);
                cfg.mdts = match kib {
                    0 => 0,
                    k if k >= 4 && k.is_power_of_two() && k <= 8192 => {
                        (k / 4).trailing_zeros() as u8
                    }
                    _ => {
                        eprintln!(
                            "rsrdma-target: --mdts-kib must be 0 or a power of two from 4 to 8192"
                        );
                        usage()
                    }
                }
            }
            "--inline" => cfg.inline = num(&value(&mut args, &a), &a),
            "--queue-size" => cfg.queue_size = num(&value(&mut args, &a), &a),
            "--max-io-queues" => cfg.max_io_queues = num(&value(&mut args, &a), &a),
            "--mode" => {
                let m = value(&mut args, &a);
                cfg.mode = Mode::parse(&m).unwrap_or_else(|| {
                    eprintln!("rsrdma-target: unknown mode '{m}'");
                    usage()
                })
            }
            "--after-reconnect" => cfg.after_reconnect = true,
            "--persist" => cfg.persist = true,
            "--arm" => {
                cfg.arm_on_signal = match value(&mut args, &a).as_str() {
                    "now" => false,
                    "signal" => true,
                    _ => usage(),
                }
            }
            "--mid-min" => cfg.mid_min = num(&value(&mut args, &a), &a),
            "-v" | "--verbose" => cfg.verbose = true,
            "--raw-bw" => {
                raw_on = true;
                raw.op = match value(&mut args, &a).as_str() {
                    "write" => RawOp::Write,
                    "read" => RawOp::Read,
                    _ => usage(),
                }
            }
            "--qps" => raw.qps = num(&value(&mut args, &a), &a),
            "--depth" => raw.depth = num(&value(&mut args, &a), &a),
            "--msg-bytes" => raw.msg_bytes = num(&value(&mut args, &a), &a),
            "--seconds" => raw.seconds = num(&value(&mut args, &a), &a),
            "-h" | "--help" => usage(),
            _ => {
                eprintln!("rsrdma-target: unknown argument '{a}'");
                usage()
            }
        }
    }
    if cfg.size < 1 << 20 || cfg.queue_size < 2 || cfg.queue_size > 1024 || cfg.max_io_queues == 0 {
        eprintln!("rsrdma-target: size, queue size or queue count out of range");
        usage()
    }
    if raw.qps == 0
        || raw.depth == 0
        || raw.seconds == 0
        || raw.msg_bytes == 0
        || raw.msg_bytes > 1 << 30
    {
        eprintln!("rsrdma-target: --qps, --depth, --seconds or --msg-bytes out of range");
        usage()
    }
    raw.addr = cfg.addr.clone();
    raw.port = cfg.port;
    (cfg, raw_on.then_some(raw))
}

fn main() {
    let (cfg, raw) = parse_args();
    if let Some(raw) = raw {
        match raw::run(&raw) {
            Ok(r) => println!(
                "raw: {} event {} QP {} B x {} in flight: {:.1} MiB/s ({} messages in {:.1} s)",
                raw.op.name(),
                raw.qps,
                raw.msg_bytes,
                raw.depth,
                r.mib_s,
                r.messages,
                r.seconds
            ),
            Err(e) => {
                eprintln!("rsrdma-target: raw {}: {e}", raw.op.name());
                std::process::exit(1);
            }
        }
        return;
    }
    if let Err(e) = target::run(cfg) {
        println!("target: error: {e}");
        eprintln!("rsrdma-target: {e}");
        std::process::exit(1);
    }
}
