//! [`Budget`]: the time one tool call has for the cluster, `--call-timeout-ms` from its
//! start. The client bounds each of its calls by the same time; a tool that makes several
//! (a write, then the revoked notes it met) shares one budget among them, so the whole
//! tool call answers within it while the MCP host still waits.

use std::future::Future;
use std::time::Duration;

use cairn_client::ClientError;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    total: Duration,
    deadline: Instant,
}

impl Budget {
    /// A budget of `total`, starting now.
    pub fn start(total: Duration) -> Budget {
        Budget {
            total,
            deadline: Instant::now() + total,
        }
    }

    /// `work`'s output, or `None` once the budget is spent.
    pub async fn within<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout_at(self.deadline, work).await.ok()
    }

    /// The failure of a tool call whose budget ran out before anything was sent that
    /// could change the cluster (a read, or what a mutation needs first).
    pub fn spent(&self) -> ClientError {
        ClientError::Transport {
            endpoint: String::new(),
            message: self.no_answer(),
            sent: false,
        }
    }

    /// The failure of a mutation cut off by the budget: it may have been applied, and a
    /// repeat under `request_id` settles it.
    pub fn spent_on_mutation(&self, request_id: &str) -> ClientError {
        ClientError::OutcomeUnknown {
            request_id: request_id.to_string(),
            message: self.no_answer(),
        }
    }

    fn no_answer(&self) -> String {
        format!("the call timeout of {} ms ran out", self.total.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_past_the_deadline_is_cut_and_work_within_it_is_not() {
        let budget = Budget::start(Duration::from_millis(50));
        assert_eq!(budget.within(async { 7 }).await, Some(7));
        let slow = tokio::time::sleep(Duration::from_secs(30));
        assert_eq!(budget.within(slow).await, None);
        // Spent: nothing is waited for any more.
        let started = Instant::now();
        assert_eq!(budget.within(std::future::pending::<()>()).await, None);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_cut_mutation_is_an_unknown_outcome_under_its_request_id() {
        let budget = Budget::start(Duration::from_millis(3_000));
        let err = budget.spent_on_mutation("r1").to_string();
        assert_eq!(
            err,
            "outcome_unknown: the call timeout of 3000 ms ran out (request_id r1)"
        );
        assert!(matches!(
            budget.spent(),
            ClientError::Transport { sent: false, .. }
        ));
    }
}
