// SPDX-License-Identifier: GPL-2.0

//! Compiles src/shim.c (the inline parts of the verbs API, and flat accessors to the
//! librdmacm/libibverbs structures) into a static library with the system C compiler, and
//! links librdmacm and libibverbs.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn run(cmd: &mut Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed with {status}");
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("shim.o");
    let lib = out.join("librsrdma_shim.a");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-env-changed=CC");
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists()
        || !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists()
    {
        panic!("librdmacm/libibverbs headers missing: install librdmacm-dev and libibverbs-dev");
    }
    run(Command::new(&cc)
        .args([
            "-O2",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fPIC",
            "-c",
            "src/shim.c",
            "-o",
        ])
        .arg(&obj));
    let _ = std::fs::remove_file(&lib);
    run(Command::new("ar").arg("crs").arg(&lib).arg(&obj));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=rsrdma_shim");
    println!("cargo:rustc-link-lib=dylib=rdmacm");
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
