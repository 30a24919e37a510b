// SPDX-License-Identifier: GPL-2.0

//! Reconnect policy after the loss of the link to a controller.
//!
//! Times are milliseconds of a monotonic clock supplied by the caller (the
//! kernel side passes jiffies converted to milliseconds), so the logic is
//! deterministic and testable.
//!
//! When the link is lost the caller creates a [`Reconnect`] and asks it what
//! to do with [`Reconnect::next`], first with [`Outcome::First`] and then
//! after every failed attempt with [`Outcome::Failed`]:
//!
//! - The first attempt is immediate and always made, whatever the
//!   controller loss timeout (so `ctrl_loss_tmo=0` means "give up after the
//!   first failed attempt").
//! - Each later attempt starts `reconnect_delay` after the previous attempt
//!   *started*, or immediately if that time has already passed (an attempt
//!   that itself took longer than the delay).
//! - A failure whose status has the DNR bit set ends the reconnect, unless the status says
//!   the target's configuration is changing ([`config_in_flux`]): the caller retries those.
//! - An attempt that would start after `ctrl_loss_tmo` from the link loss is
//!   not made: the reconnect gives up instead. An attempt starting exactly
//!   at the deadline is still made.
//!
//! Every [`Decision::AttemptNow`] or [`Decision::AttemptIn`] is taken as a
//! commitment: the state records that an attempt starts at that time.
//! [`Reconnect::bring_forward`] moves it earlier (a port or device came
//! back), and [`Reconnect::again`] decides it again when it never ran.
//! Once the state has given up, it keeps returning the same
//! [`Decision::GiveUp`].

/// The reconnect parameters of a controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Time between the starts of two consecutive attempts.
    pub reconnect_delay_ms: u64,
    /// Time after the link loss past which no attempt is started; `None`
    /// to try forever.
    pub ctrl_loss_tmo_ms: Option<u64>,
}

impl Policy {
    /// Builds the policy from the `reconnect_delay` and `ctrl_loss_tmo`
    /// fabrics options, in seconds. `reconnect_delay` must be at least 1;
    /// a negative `ctrl_loss_tmo` means forever.
    pub fn from_opts(reconnect_delay_s: i32, ctrl_loss_tmo_s: i32) -> Result<Policy, &'static str> {
        if reconnect_delay_s < 1 {
            return Err("reconnect_delay must be at least 1 second");
        }
        Ok(Policy {
            reconnect_delay_ms: u64::from(reconnect_delay_s.unsigned_abs()) * 1000,
            ctrl_loss_tmo_ms: u64::try_from(ctrl_loss_tmo_s).ok().map(|s| s * 1000),
        })
    }
}

/// What happened to the previous attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No attempt has been made yet.
    First,
    /// The previous attempt failed.
    Failed {
        /// The failure carried an NVMe status with the DNR bit set, or authentication
        /// failed: it would fail again.
        dnr: bool,
    },
}

/// Why the reconnect gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The last attempt failed with the DNR bit set, or its authentication failed.
    Dnr,
    /// The next attempt would start after the controller loss timeout.
    LossTimeout,
}

impl GiveUpReason {
    /// Describes the reason, for the log.
    pub fn msg(&self) -> &'static str {
        match self {
            GiveUpReason::Dnr => "connect failed with DNR set, or authentication failed",
            GiveUpReason::LossTimeout => "controller loss timeout expired",
        }
    }
}

/// Connect statuses (status code type and code, as the core returns them) with which a target
/// refuses a controller it knew a moment ago while its configuration changes: the host not (or
/// not yet) allowed on the subsystem (Connect Invalid Host), or the subsystem not (yet) there or
/// not on the port (Connect Invalid Parameters, which nvmet-rdma answers for an unknown
/// subsystem). A target sets DNR with both, rightly for a first connect; for a controller that
/// was live they mean "not now". The reason, for the log; `None` for any other status.
pub fn config_in_flux(status: u16) -> Option<&'static str> {
    // The status code type and code only: not DNR (bit 14), More (13) or the retry delay
    // (11-12).
    match status & 0x7ff {
        0x184 => Some("host not allowed"),
        0x182 => Some("invalid connect parameters (subsystem not found)"),
        _ => None,
    }
}

/// What the caller must do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start an attempt now.
    AttemptNow,
    /// Start an attempt after this many milliseconds (never 0).
    AttemptIn(u64),
    /// Stop reconnecting and delete the controller.
    GiveUp(GiveUpReason),
}

/// The reconnect state of a controller, from one link loss until it is
/// connected again or given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reconnect {
    policy: Policy,
    start_ms: u64,
    last_attempt_ms: Option<u64>,
    attempts: u32,
    gave_up: Option<GiveUpReason>,
}

impl Reconnect {
    /// Starts the reconnect state at the link loss, at `now_ms`.
    pub fn start(policy: Policy, now_ms: u64) -> Self {
        Self {
            policy,
            start_ms: now_ms,
            last_attempt_ms: None,
            attempts: 0,
            gave_up: None,
        }
    }

    /// Decides what to do at `now_ms`, given how the last attempt ended.
    ///
    /// [`Outcome::First`] once attempts have been made is taken as a
    /// failure without DNR.
    pub fn next(&mut self, now_ms: u64, last_attempt: Outcome) -> Decision {
        if let Some(reason) = self.gave_up {
            return Decision::GiveUp(reason);
        }
        let at = match (last_attempt, self.last_attempt_ms) {
            (Outcome::First, None) => now_ms,
            (Outcome::Failed { dnr: true }, _) => return self.give_up(GiveUpReason::Dnr),
            (_, last) => {
                let due = last
                    .unwrap_or(self.start_ms)
                    .saturating_add(self.policy.reconnect_delay_ms);
                let at = due.max(now_ms);
                if let Some(tmo) = self.policy.ctrl_loss_tmo_ms {
                    if at > self.start_ms.saturating_add(tmo) {
                        return self.give_up(GiveUpReason::LossTimeout);
                    }
                }
                at
            }
        };
        self.last_attempt_ms = Some(at);
        self.attempts = self.attempts.saturating_add(1);
        Self::due(at, now_ms)
    }

    /// Follows a policy changed while reconnecting (the controller's `reconnect_delay` or
    /// `ctrl_loss_tmo` written through sysfs): the next decision uses it, counting from the
    /// same loss and the same last attempt.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// Decides again the attempt decided last, which never ran: its work item was cancelled
    /// while it waited, or the attempt before it could not queue it. The attempt keeps its
    /// start time and is not counted twice; with none decided yet this is the first.
    pub fn again(&mut self, now_ms: u64) -> Decision {
        if let Some(reason) = self.gave_up {
            return Decision::GiveUp(reason);
        }
        match self.last_attempt_ms {
            None => self.next(now_ms, Outcome::First),
            Some(at) => Self::due(at, now_ms),
        }
    }

    /// Brings the attempt decided last forward to `now_ms` if it was due later (its port or a
    /// device came back). It then counts from there: the next one is due `reconnect_delay`
    /// later, and deciding it again (see [`Reconnect::again`]) before it ran keeps it due now.
    /// An attempt that starts late is not brought forward, so delays do not add up.
    pub fn bring_forward(&mut self, now_ms: u64) {
        if let Some(at) = self.last_attempt_ms.as_mut() {
            *at = (*at).min(now_ms);
        }
    }

    /// The decision for an attempt due at `at_ms`.
    fn due(at_ms: u64, now_ms: u64) -> Decision {
        match at_ms.saturating_sub(now_ms) {
            0 => Decision::AttemptNow,
            wait => Decision::AttemptIn(wait),
        }
    }

    fn give_up(&mut self, reason: GiveUpReason) -> Decision {
        self.gave_up = Some(reason);
        Decision::GiveUp(reason)
    }

    /// Number of attempts decided so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time since the link loss (0 if the clock is before it).
    #[cfg(test)]
    pub fn elapsed_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.start_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOSS: GiveUpReason = GiveUpReason::LossTimeout;

    fn policy(delay_s: i32, tmo_s: i32) -> Policy {
        Policy::from_opts(delay_s, tmo_s).unwrap()
    }

    fn failed() -> Outcome {
        Outcome::Failed { dnr: false }
    }

    #[test]
    fn from_opts() {
        assert!(Policy::from_opts(0, 600).is_err());
        assert!(Policy::from_opts(-1, 600).is_err());
        assert!(Policy::from_opts(i32::MIN, -1).is_err());
        assert_eq!(
            policy(10, 600),
            Policy {
                reconnect_delay_ms: 10_000,
                ctrl_loss_tmo_ms: Some(600_000)
            }
        );
        assert_eq!(policy(1, 0).ctrl_loss_tmo_ms, Some(0));
        assert_eq!(policy(1, -1).ctrl_loss_tmo_ms, None);
        assert_eq!(policy(1, i32::MIN).ctrl_loss_tmo_ms, None);
        let max = policy(i32::MAX, i32::MAX);
        assert_eq!(max.reconnect_delay_ms, 2_147_483_647_000);
        assert_eq!(max.ctrl_loss_tmo_ms, Some(2_147_483_647_000));
    }

    #[test]
    fn default_policy_runs_until_the_deadline() {
        let t0 = 1_000_000;
        let mut r = Reconnect::start(policy(10, 600), t0);
        assert_eq!(r.attempts(), 0);
        assert_eq!(r.next(t0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.attempts(), 1);
        // The attempt fails after 2 s: the next one starts 10 s after the
        // previous one started.
        assert_eq!(r.next(t0 + 2_000, failed()), Decision::AttemptIn(8_000));
        assert_eq!(r.attempts(), 2);
        // Attempts at 0, 10, ..., 600 s: the one at exactly 600 s is made.
        let mut start = t0 + 10_000;
        loop {
            match r.next(start + 500, failed()) {
                Decision::AttemptIn(ms) => {
                    assert_eq!(ms, 9_500);
                    start += 10_000;
                }
                Decision::GiveUp(reason) => {
                    assert_eq!(reason, LOSS);
                    break;
                }
                Decision::AttemptNow => panic!("unexpected immediate attempt"),
            }
        }
        assert_eq!(start, t0 + 600_000);
        assert_eq!(r.attempts(), 61);
        assert_eq!(r.elapsed_ms(start + 500), 600_500);
        // Given up stays given up.
        assert_eq!(r.next(start + 600, failed()), Decision::GiveUp(LOSS));
        assert_eq!(r.next(start + 600, Outcome::First), Decision::GiveUp(LOSS));
        assert_eq!(r.attempts(), 61);
    }

    #[test]
    fn ctrl_loss_tmo_zero_gives_up_after_first_failure() {
        let mut r = Reconnect::start(policy(10, 0), 50);
        assert_eq!(r.next(50, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(60, failed()), Decision::GiveUp(LOSS));
        assert_eq!(r.attempts(), 1);
    }

    #[test]
    fn first_attempt_is_made_even_past_the_deadline() {
        let mut r = Reconnect::start(policy(10, 0), 0);
        assert_eq!(r.next(5_000, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(6_000, failed()), Decision::GiveUp(LOSS));
    }

    #[test]
    fn policy_changed_while_reconnecting() {
        // ctrl_loss_tmo 20 s: the attempt at 20 s is the last.
        let mut r = Reconnect::start(policy(10, 20), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(1_000, failed()), Decision::AttemptIn(9_000));
        // ctrl_loss_tmo -1 written meanwhile: no deadline any more.
        r.set_policy(policy(10, -1));
        assert_eq!(r.next(11_000, failed()), Decision::AttemptIn(9_000));
        // The attempt at 30 s, past the old deadline.
        assert_eq!(r.next(21_000, failed()), Decision::AttemptIn(9_000));
        // A shorter delay counts from the last attempt (at 30 s), the deadline from the loss.
        r.set_policy(policy(2, 35));
        assert_eq!(r.next(31_000, failed()), Decision::AttemptIn(1_000));
        assert_eq!(r.next(32_500, failed()), Decision::AttemptIn(1_500));
        assert_eq!(r.next(34_500, failed()), Decision::GiveUp(LOSS));
    }

    #[test]
    fn delay_longer_than_timeout() {
        let mut r = Reconnect::start(policy(20, 10), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(100, failed()), Decision::GiveUp(LOSS));
    }

    #[test]
    fn attempt_exactly_at_deadline() {
        let mut r = Reconnect::start(policy(10, 20), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(1, failed()), Decision::AttemptIn(9_999));
        assert_eq!(r.next(10_001, failed()), Decision::AttemptIn(9_999));
        assert_eq!(r.next(20_001, failed()), Decision::GiveUp(LOSS));
        assert_eq!(r.attempts(), 3);
    }

    #[test]
    fn slow_attempt_retries_immediately() {
        let mut r = Reconnect::start(policy(10, 600), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        // The attempt took 15 s, longer than the delay.
        assert_eq!(r.next(15_000, failed()), Decision::AttemptNow);
        // Next one is measured from the start of that attempt.
        assert_eq!(r.next(16_000, failed()), Decision::AttemptIn(9_000));
        // Exactly on time is immediate too.
        assert_eq!(r.next(35_000, failed()), Decision::AttemptNow);
        // A slow attempt past the deadline gives up.
        assert_eq!(r.next(601_000, failed()), Decision::GiveUp(LOSS));
        assert_eq!(r.attempts(), 4);
    }

    #[test]
    fn slow_attempt_ending_at_the_deadline_retries() {
        let mut r = Reconnect::start(policy(10, 60), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(60_000, failed()), Decision::AttemptNow);
        assert_eq!(r.next(60_001, failed()), Decision::GiveUp(LOSS));
    }

    #[test]
    fn an_attempt_decided_again_keeps_its_time() {
        let mut r = Reconnect::start(policy(10, 15), 0);
        assert_eq!(r.again(0), Decision::AttemptNow);
        assert_eq!(r.attempts(), 1);
        // Cancelled before it ran: still due now, not pushed past the deadline.
        assert_eq!(r.again(2), Decision::AttemptNow);
        assert_eq!(r.next(100, failed()), Decision::AttemptIn(9_900));
        assert_eq!(r.again(4_000), Decision::AttemptIn(6_000));
        assert_eq!(r.again(12_000), Decision::AttemptNow);
        assert_eq!(r.attempts(), 2);
        // Counted as failed instead, it would have been the one past the deadline.
        assert_eq!(r.next(12_000, failed()), Decision::GiveUp(LOSS));
        assert_eq!(r.again(12_000), Decision::GiveUp(LOSS));
    }

    #[test]
    fn an_attempt_brought_forward_counts_from_its_start() {
        let mut r = Reconnect::start(policy(6, 10), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        r.bring_forward(10);
        assert_eq!(r.next(500, failed()), Decision::AttemptIn(5_500));
        // Brought forward to 1 s: the next one is due 6 s later, within the deadline.
        r.bring_forward(1_000);
        assert_eq!(r.next(1_200, failed()), Decision::AttemptIn(5_800));
        // Late: still counted from when it was due.
        r.bring_forward(7_500);
        assert_eq!(r.next(7_600, failed()), Decision::GiveUp(LOSS));
        assert_eq!(r.attempts(), 3);
    }

    #[test]
    fn an_attempt_brought_forward_stays_forward_when_decided_again() {
        let mut r = Reconnect::start(policy(10, 60), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(100, failed()), Decision::AttemptIn(9_900));
        r.bring_forward(2_000);
        assert_eq!(r.again(2_050), Decision::AttemptNow);
        // A later kick does not push it back.
        r.bring_forward(5_000);
        assert_eq!(r.again(5_000), Decision::AttemptNow);
        assert_eq!(r.attempts(), 2);
        // Later still: it counts from the time it was brought forward to.
        r.bring_forward(5_100);
        assert_eq!(r.next(5_200, failed()), Decision::AttemptIn(6_800));
    }

    #[test]
    fn config_in_flux_statuses() {
        // nvmet's answers: Connect Invalid Host and Invalid Parameters, with DNR.
        assert_eq!(config_in_flux(0x4184), Some("host not allowed"));
        assert_eq!(
            config_in_flux(0x4182),
            Some("invalid connect parameters (subsystem not found)")
        );
        assert_eq!(config_in_flux(0x184), Some("host not allowed"));
        // More and a command retry delay do not change it.
        assert_eq!(config_in_flux(0x6184), Some("host not allowed"));
        assert_eq!(config_in_flux(0x4984), Some("host not allowed"));
        // Controller busy, invalid format, a generic error, success, another type's 0x84:
        // not in flux.
        for s in [0x4181, 0x180, 0x4002, 0x0, 0x4084, 0x4284] {
            assert_eq!(config_in_flux(s), None, "{s:#x}");
        }
    }

    #[test]
    fn dnr_gives_up() {
        let mut r = Reconnect::start(policy(10, -1), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(1, failed()), Decision::AttemptIn(9_999));
        let dnr = Outcome::Failed { dnr: true };
        assert_eq!(r.next(10_500, dnr), Decision::GiveUp(GiveUpReason::Dnr));
        assert_eq!(
            r.next(20_000, failed()),
            Decision::GiveUp(GiveUpReason::Dnr)
        );
        assert_eq!(r.attempts(), 2);
        assert_eq!(
            GiveUpReason::Dnr.msg(),
            "connect failed with DNR set, or authentication failed"
        );
        assert_eq!(LOSS.msg(), "controller loss timeout expired");
    }

    #[test]
    fn forever_never_gives_up() {
        let mut r = Reconnect::start(policy(1, -1), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        let mut now = 0;
        for _ in 0..100_000 {
            now += 1_500;
            assert_eq!(r.next(now, failed()), Decision::AttemptNow);
        }
        assert_eq!(r.attempts(), 100_001);
        assert_eq!(r.elapsed_ms(now), 150_000_000);
    }

    #[test]
    fn clock_extremes_do_not_overflow() {
        let mut r = Reconnect::start(policy(i32::MAX, -1), u64::MAX - 10);
        assert_eq!(r.next(u64::MAX - 10, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(u64::MAX - 5, failed()), Decision::AttemptIn(5));
        assert_eq!(r.next(u64::MAX, failed()), Decision::AttemptNow);
        assert_eq!(r.next(u64::MAX, failed()), Decision::AttemptNow);

        let mut r = Reconnect::start(policy(1, i32::MAX), u64::MAX - 10);
        assert_eq!(r.next(u64::MAX - 10, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(u64::MAX, failed()), Decision::AttemptNow);

        // A clock before the link loss.
        let mut r = Reconnect::start(policy(10, 60), 1_000);
        assert_eq!(r.elapsed_ms(0), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(0, failed()), Decision::AttemptIn(10_000));
    }

    #[test]
    fn outcome_first_after_attempts_counts_as_failure() {
        let mut r = Reconnect::start(policy(10, 600), 0);
        assert_eq!(r.next(0, Outcome::First), Decision::AttemptNow);
        assert_eq!(r.next(1_000, Outcome::First), Decision::AttemptIn(9_000));
        assert_eq!(r.attempts(), 2);
    }

    #[test]
    fn failure_before_any_attempt_waits_from_link_loss() {
        let mut r = Reconnect::start(policy(10, 600), 0);
        assert_eq!(r.next(2_000, failed()), Decision::AttemptIn(8_000));
        assert_eq!(r.attempts(), 1);
    }
}
