//! Fluid flows over shared resources.
//!
//! A flow is work (bytes, or seconds of a copy engine) that drains through up to three
//! resources at once: a link direction, and for RDMA the sender's and the receiver's NIC.
//! Every resource splits its capacity equally among the flows on it, and a flow drains at
//! the smallest share it gets (its bottleneck). When a flow starts or ends, only the flows
//! sharing one of its resources change rate, so an event costs a walk over those flows,
//! not over every flow in the system.
//!
//! Equal shares are max-min fair whenever each flow's bottleneck is the same resource for
//! all flows on it, which is the common case (one link per transfer, or one NIC per rank);
//! where bottlenecks differ the model leaves the unused share idle rather than iterate to
//! the max-min fixpoint: a small, documented pessimism for a large saving in cost.

/// Index of a resource.
pub(crate) type ResourceId = u32;
/// Index of a flow.
pub(crate) type FlowId = u32;

/// A capacity shared equally by the flows on it.
#[derive(Debug)]
struct Resource {
    /// Units (bytes, or engine seconds) per second.
    capacity: f64,
    flows: Vec<FlowId>,
}

/// One flow: what remains, how fast it drains, and where it sits.
#[derive(Debug, Clone)]
struct Flow {
    remaining: f64,
    rate: f64,
    /// Time `remaining` was last brought up to date.
    settled_at: f64,
    /// Bumped on every rate change, so stale completion events can be recognised.
    version: u32,
    /// The last [`Flows::rerate`] call that updated this flow (a flow on two of the
    /// resources being rerated is updated once).
    rerated: u64,
    resources: [ResourceId; 3],
    slots: [u32; 3],
    used: u8,
    /// Who owns the flow (the engine's stream index).
    owner: u32,
}

/// A completion the engine must schedule: `flow` ends at `at` unless its version changed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Finish {
    pub at: f64,
    pub flow: FlowId,
    pub version: u32,
}

/// Every resource and every live flow.
#[derive(Debug, Default)]
pub(crate) struct Flows {
    resources: Vec<Resource>,
    flows: Vec<Flow>,
    free: Vec<FlowId>,
    rerates: u64,
}

impl Flows {
    /// Add a resource of `capacity` units per second.
    pub fn add_resource(&mut self, capacity: f64) -> ResourceId {
        self.resources.push(Resource {
            capacity,
            flows: Vec::new(),
        });
        (self.resources.len() - 1) as ResourceId
    }

    /// Start a flow of `work` units over `resources` at `now`; every flow whose rate
    /// changed (the new one included) gets a new finish time in `out`.
    pub fn start(
        &mut self,
        now: f64,
        work: f64,
        resources: &[ResourceId],
        owner: u32,
        out: &mut Vec<Finish>,
    ) {
        debug_assert!((1..=3).contains(&resources.len()));
        self.settle(now, resources);
        let id = self.free.pop().unwrap_or_else(|| {
            self.flows.push(Flow::idle());
            (self.flows.len() - 1) as FlowId
        });
        let mut flow = Flow {
            remaining: work,
            settled_at: now,
            owner,
            used: resources.len() as u8,
            version: self.flows[id as usize].version.wrapping_add(1),
            ..Flow::idle()
        };
        for (i, &r) in resources.iter().enumerate() {
            let res = &mut self.resources[r as usize];
            flow.resources[i] = r;
            flow.slots[i] = res.flows.len() as u32;
            res.flows.push(id);
        }
        self.flows[id as usize] = flow;
        self.rerate(now, resources, out);
    }

    /// The flow's owner, if `finish` is still its current completion.
    pub fn is_current(&self, finish: &Finish) -> bool {
        self.flows
            .get(finish.flow as usize)
            .is_some_and(|f| f.version == finish.version && f.used > 0)
    }

    /// End a flow at `now` (its completion came due); returns its owner. Flows that shared
    /// a resource with it get new finish times in `out`.
    pub fn finish(&mut self, now: f64, id: FlowId, out: &mut Vec<Finish>) -> u32 {
        let flow = self.flows[id as usize].clone();
        let resources = &flow.resources[..flow.used as usize];
        self.settle(now, resources);
        for (i, &r) in resources.iter().enumerate() {
            let res = &mut self.resources[r as usize];
            let slot = flow.slots[i] as usize;
            res.flows.swap_remove(slot);
            if let Some(&moved) = res.flows.get(slot) {
                let m = &mut self.flows[moved as usize];
                let k = m.resources[..m.used as usize]
                    .iter()
                    .position(|&x| x == r)
                    .expect("a flow on a resource lists it");
                m.slots[k] = slot as u32;
            }
        }
        let f = &mut self.flows[id as usize];
        f.used = 0;
        f.version = f.version.wrapping_add(1);
        self.free.push(id);
        self.rerate(now, resources, out);
        flow.owner
    }

    /// Bring every flow on `resources` up to `now` at its current rate.
    fn settle(&mut self, now: f64, resources: &[ResourceId]) {
        for &r in resources {
            for &id in &self.resources[r as usize].flows {
                let f = &mut self.flows[id as usize];
                f.remaining = (f.remaining - f.rate * (now - f.settled_at)).max(0.0);
                f.settled_at = now;
            }
        }
    }

    /// Recompute the rate of every flow on `resources`, and its finish time.
    fn rerate(&mut self, now: f64, resources: &[ResourceId], out: &mut Vec<Finish>) {
        self.rerates += 1;
        for &r in resources {
            for i in 0..self.resources[r as usize].flows.len() {
                let id = self.resources[r as usize].flows[i];
                let f = &self.flows[id as usize];
                if f.rerated == self.rerates {
                    continue;
                }
                let rate = f.resources[..f.used as usize]
                    .iter()
                    .map(|&x| {
                        let res = &self.resources[x as usize];
                        res.capacity / res.flows.len() as f64
                    })
                    .fold(f64::INFINITY, f64::min);
                let f = &mut self.flows[id as usize];
                f.rate = rate;
                f.rerated = self.rerates;
                f.version = f.version.wrapping_add(1);
                out.push(Finish {
                    at: now + f.remaining / rate,
                    flow: id,
                    version: f.version,
                });
            }
        }
    }
}

impl Flow {
    fn idle() -> Flow {
        Flow {
            remaining: 0.0,
            rate: 0.0,
            settled_at: 0.0,
            version: 0,
            rerated: 0,
            resources: [0; 3],
            slots: [0; 3],
            used: 0,
            owner: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_flows_share_a_resource_and_the_survivor_speeds_up() {
        let mut flows = Flows::default();
        let link = flows.add_resource(10.0);
        let mut out = Vec::new();
        flows.start(0.0, 10.0, &[link], 0, &mut out);
        assert_eq!(out.last().unwrap().at, 1.0);
        out.clear();
        flows.start(0.0, 20.0, &[link], 1, &mut out);
        let first = out.iter().find(|f| flows.flows[f.flow as usize].owner == 0);
        assert_eq!(first.unwrap().at, 2.0, "half the capacity each");
        let first = *first.unwrap();
        out.clear();
        assert_eq!(flows.finish(2.0, first.flow, &mut out), 0);
        // The second flow drained 10 of 20 in 2 s; the rest goes at full speed.
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].at, 3.0);
    }

    #[test]
    fn a_flow_drains_at_its_bottleneck() {
        let mut flows = Flows::default();
        let (fast, slow) = (flows.add_resource(100.0), flows.add_resource(4.0));
        let mut out = Vec::new();
        flows.start(1.0, 8.0, &[fast, slow], 7, &mut out);
        assert_eq!(
            out.len(),
            1,
            "one finish per flow, however many resources it uses"
        );
        assert_eq!(out[0].at, 3.0);
        assert!(flows.is_current(&out[0]));
    }
}
