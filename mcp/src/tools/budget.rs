//! [`Budget`]: the time one tool call has for the cluster, `--call-timeout-ms` from its
//! start (over HTTP, from its request's arrival, so the token check comes out of it). A
//! tool that makes several calls (a write, then the revoked notes it met) makes them all
//! through [`Budget::client`], whose calls end by the budget's deadline as a call ends at
//! its call timeout: a write cut off is `outcome_unknown` under its `request_id`, a read
//! the last answer a node gave, and a call with no time left begins nothing. So the whole
//! tool call answers within the budget while the MCP host still waits.

use std::time::Duration;

use cairn_client::Client;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    deadline: Instant,
}

impl Budget {
    /// A budget of `total`, starting now.
    pub fn start(total: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + total,
        }
    }

    /// `client`, with every call ending by this budget's deadline.
    pub fn client(&self, client: &Client) -> Client {
        client.until(self.deadline.into_std())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_client::ClientError;

    /// A `whoami` within a budget of `total` at port 1 of loopback, where nothing listens
    /// (every attempt is refused at once, so only the budget ends the client's 1,000
    /// retries and 60 s call timeout): its failure, which sent nothing, and how long it
    /// took.
    async fn whoami_at_a_closed_port_within(total: Duration) -> (String, Duration) {
        let client = Client::builder(vec!["http://127.0.0.1:1".into()])
            .retries_max(1_000)
            .call_timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let started = Instant::now();
        let err = Budget::start(total)
            .client(&client)
            .whoami()
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(err, ClientError::Transport { sent: false, .. }),
            "{err}"
        );
        (err.to_string(), started.elapsed())
    }

    /// The client stops once no further attempt fits before the deadline, with the last
    /// refusal it met.
    #[tokio::test]
    async fn a_budgets_client_gives_up_by_its_deadline_not_at_its_call_timeout() {
        let (_, waited) = whoami_at_a_closed_port_within(Duration::from_millis(300)).await;
        assert!(waited < Duration::from_secs(2), "{waited:?}");
    }

    #[tokio::test]
    async fn a_spent_budget_begins_nothing() {
        let (err, waited) = whoami_at_a_closed_port_within(Duration::ZERO).await;
        assert!(err.contains("ran out finding the leader"), "{err}");
        assert!(waited < Duration::from_secs(1), "{waited:?}");
    }
}
