//! The emulator: rattan-core's cell graph on a runtime whose threads live
//! in the link's emulator namespace, over the network of [`LinkEnv`].
//!
//! This is what rattan-core's `RattanRadix` does for its Isolated mode,
//! built on [`LinkEnv`] instead of rattan-env's builder, and with a
//! teardown that does not wait on each veth's deletion.

use std::{panic::AssertUnwindSafe, sync::Arc, thread::JoinHandle};

use anyhow::{anyhow, Context, Result};
use nix::sched::{setns, CloneFlags};
use rattan_core::{
    cells::{
        external::{VirtualEthernet, VirtualEthernetId},
        Cell, StdPacket,
    },
    core::{CellFactory, RattanCore},
    metal::io::common::InterfaceDriver,
};
use rattan_env::netns::NetNsGuard;
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

use crate::linkenv::LinkEnv;

/// The cell graph with its runtime and network. Cells "left" and "right"
/// are the emulator's veth ends towards the sender and the receiver.
pub struct Emulator<D>
where
    D: InterfaceDriver<Packet = StdPacket>,
{
    // dropped in this order by `stop`; fields are Options so it can take them
    core: Option<RattanCore<D>>,
    runtime_thread: Option<JoinHandle<()>>,
    env: Option<LinkEnv>,
}

impl<D> Emulator<D>
where
    D: InterfaceDriver<Packet = StdPacket>,
    D::Sender: Send + Sync,
    D::Receiver: Send,
{
    /// Builds the network, a runtime of `workers` threads inside the
    /// emulator namespace, and the cells of both veth ends.
    pub fn new(workers: usize) -> Result<Self> {
        let env = LinkEnv::create()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let rt_cancel = CancellationToken::new();
        let rt_cancel_thread = rt_cancel.clone();
        let emulator_ns = env.emulator_ns.clone();
        let runtime_thread = std::thread::Builder::new()
            .name("rattan-runtime".into())
            .spawn(move || {
                // the runtime's threads are spawned from here and so start
                // in the emulator namespace
                let built = setns(emulator_ns.as_ref(), CloneFlags::CLONE_NEWNET)
                    .context("cannot enter the emulator namespace")
                    .and_then(|_| {
                        tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(workers)
                            .enable_all()
                            .build()
                            .map(Arc::new)
                            .context("cannot build the emulator's runtime")
                    });
                match built {
                    Ok(rt) => {
                        let _ = tx.send(Ok(rt.clone()));
                        rt.block_on(rt_cancel_thread.cancelled());
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .context("cannot start the runtime thread")?;
        let runtime: Arc<Runtime> = rx
            .recv()
            .map_err(|_| anyhow!("the runtime thread ended before its runtime was built"))??;
        let core = RattanCore::new(runtime, CancellationToken::new(), rt_cancel);
        let mut emu = Self {
            core: Some(core),
            runtime_thread: Some(runtime_thread),
            env: Some(env),
        };
        let env = emu.env.as_ref().expect("set above");
        let ends = [
            ("left", env.left_inner.clone(), 1u8),
            ("right", env.right_inner.clone(), 2u8),
        ];
        let ns = env.emulator_ns.clone();
        for (name, veth, side) in ends {
            let ns = ns.clone();
            emu.build_cell(name.into(), move |rt| {
                let _g = rt.enter();
                // the driver's sockets must be opened inside the emulator namespace
                let _ns = NetNsGuard::new(ns)?;
                let mut id = VirtualEthernetId::new();
                id.set_ns_id(side);
                id.set_veth_id(1);
                VirtualEthernet::<D>::new(veth, id)
            })
            .map_err(|e| anyhow!("cannot attach to the {name} veth: {e}"))?;
        }
        Ok(emu)
    }

    pub fn env(&self) -> &LinkEnv {
        self.env.as_ref().expect("present until stop")
    }

    fn core(&mut self) -> &mut RattanCore<D> {
        self.core.as_mut().expect("present until stop")
    }

    pub fn build_cell<V, F>(&mut self, id: String, builder: F) -> Result<(), rattan_core::error::Error>
    where
        V: Cell<StdPacket>,
        F: CellFactory<V>,
    {
        self.core().build_cell(id, builder).map(|_| ())
    }

    pub fn link_cell(&mut self, rx_id: String, tx_id: String) {
        self.core().link_cell(rx_id, tx_id);
    }

    pub fn spawn_rattan(&mut self) -> Result<(), rattan_core::error::Error> {
        self.core().spawn_rattan().map_err(Into::into)
    }

    pub fn start_rattan(&mut self) -> Result<(), rattan_core::error::Error> {
        self.core().start_rattan()
    }

    /// Stops the cells (their tasks end), removes the namespaces' names,
    /// then closes the veth sockets and the runtime. Returns an error when a
    /// cell's task had panicked (rattan's join unwraps it); the names are
    /// removed either way.
    pub fn stop(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut core = self.core.take();
        let joined = std::panic::catch_unwind(AssertUnwindSafe(|| {
            if let Some(c) = core.as_mut() {
                c.cancel_rattan();
            }
        }));
        // names first: nothing else waits for them, and the kernel frees the
        // namespaces (and their veths) by itself once the sockets below close
        drop(self.env.take());
        let dropped = std::panic::catch_unwind(AssertUnwindSafe(move || drop(core)));
        if let Some(t) = self.runtime_thread.take() {
            let _ = t.join();
        }
        match (joined, dropped) {
            (Ok(()), Ok(())) => Ok(()),
            _ => Err(anyhow!("a task of the emulator panicked")),
        }
    }
}

impl<D> Drop for Emulator<D>
where
    D: InterfaceDriver<Packet = StdPacket>,
{
    fn drop(&mut self) {
        // after an early error: tokens cancelled by the core's own drop
        drop(self.env.take());
        let core = self.core.take();
        let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(core)));
        if let Some(t) = self.runtime_thread.take() {
            let _ = t.join();
        }
    }
}
