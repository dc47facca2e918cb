//! [`Budget`]: the time one tool call has for the cluster, `--call-timeout-ms` from its
//! start. A tool that makes several calls (a write, then the revoked notes it met) makes
//! them all through [`Budget::client`], whose calls end by the budget's deadline as a call
//! ends at its call timeout: a write cut off is `outcome_unknown` under its `request_id`, a
//! read the last answer a node gave. So the whole tool call answers within the budget while
//! the MCP host still waits.

use std::future::Future;
use std::time::Duration;

use cairn_client::{Client, ClientError};
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

    /// `client`, with every call ending by this budget's deadline.
    pub fn client(&self, client: &Client) -> Client {
        client.until(self.deadline.into_std())
    }

    /// `work`'s output, or `None` once the budget is spent (for work that is not a call
    /// of a [`Budget::client`]).
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
    fn a_spent_budget_is_a_failure_before_anything_was_sent() {
        let budget = Budget::start(Duration::from_millis(3_000));
        let err = budget.spent();
        assert!(matches!(err, ClientError::Transport { sent: false, .. }));
        assert!(
            err.to_string()
                .contains("the call timeout of 3000 ms ran out"),
            "{err}"
        );
    }
}
