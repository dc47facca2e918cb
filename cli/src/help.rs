//! The examples and notes printed after `--help` (clap's `after_help`).

pub const MAIN_HELP: &str = "\
Examples:
  cairn cluster init                      # initialize the 3 local nodes
  cairn cluster status                    # one row per endpoint
  cairn write project/db 'postgres 16' --anchor path:src/db/ --tag infra
  cairn write limits/max_conns 200        # VALUE is JSON if it parses, else a string
  cairn read project/db
  cairn read project/db --consistency bounded --max-staleness-ms 500
  cairn forget project/db --reason 'moved to sqlite'
  cairn revoke facts/retry --reason 'derived from a misread log'
  cairn recall path:src/db/schema.rs topic:migrations
  cairn watch --prefix project/
  cairn --session-file ~/.cairn-session read project/db   # never older than what you saw
  cairn auth whoami                       # the principal of the token in use
  CAIRN_TOKEN_FILE=agent.token cairn write notes/x 'seen'

Token (Authorization: Bearer), the first found wins:
  1. --token-file FILE on the command line
  2. CAIRN_TOKEN, the token itself (there is no --token flag: ps shows command lines)
  3. CAIRN_TOKEN_FILE, a file holding it
  4. .cluster/admin.token in this directory or the nearest parent with one (written by
     scripts/cluster up), only when every endpoint is on loopback
  Without a token, mutations default to --actor cli; with one, to the principal's name.

HTTPS: --cacert FILE (or CAIRN_CACERT) trusts the cluster CA, and only it; --cert FILE
  --key FILE (CAIRN_CERT, CAIRN_KEY) present a client certificate. `source .cluster/env`
  after `scripts/cluster up --tls` sets CAIRN_ENDPOINTS and CAIRN_CACERT.

Exit codes:
  0 ok                1 other error          2 invalid input (400/413/422)
  3 not found (404)   4 conflict (409)       5 unavailable (503, unreachable)
  6 outcome unknown (504 / lost connection): retry with the same --request-id
  7 denied: unauthenticated (401), permission_denied or actor_mismatch (403)";

pub const WRITE_HELP: &str = "\
Examples:
  cairn write notes/todo 'ship the CLI'                 # a JSON string
  cairn write cfg/retries 3 --expected-version 0        # the number 3, only if absent
  cairn write cfg/label '\"3\"'                           # the string \"3\"
  cairn write cfg/db '{\"host\":\"db1\",\"port\":5432}' --anchor path:config/db.toml
  cairn write facts/x 'checked again' --clear-tombstone --reason 'verified'
  cairn write facts/y 'source fixed' --override-revocation --reason 'new evidence'
  cairn write docs/spec - < spec.md                     # VALUE from stdin, past the OS argument limit
  cairn write cfg/dash '\"-\"'                            # the string \"-\", not stdin";

pub const FORGET_HELP: &str = "\
Examples:
  cairn forget user/ssn --reason 'user asked for deletion'
  cairn forget cache/plan --reason obsolete --expected-version 4
The tombstone is kept forever: `cairn tombstone ID` shows it, `cairn history KEY` lists it.";

pub const REVOKE_HELP: &str = "\
Examples:
  cairn revoke facts/retry --reason 'derived from a misread log'
  cairn reinstate facts/retry --reason 'the log was right after all'
A revoked belief stays readable as a warning ([REVOKED] …) until reinstated.";

pub const READ_HELP: &str = "\
Examples:
  cairn read project/db
  cairn read project/db --consistency any
  cairn --json read project/db | jq .value
  cairn --session-file s.tok read project/db    # min_revision from the session";

pub const RECALL_HELP: &str = "\
Examples:
  cairn recall path:src/db/schema.rs topic:migrations
  cairn recall tag:infra --prefix project/ --limit 5
Cues are kind:value with kind path, symbol, tag, topic or url.";

pub const WATCH_HELP: &str = "\
Examples:
  cairn watch --prefix project/
  cairn --json watch --from-revision 120 | jq -c 'select(.kind == \"forgotten\")'
Resumes by itself after a lost connection; Ctrl-C ends it.";

pub const CLUSTER_HELP: &str = "\
Examples:
  cairn cluster init
  cairn cluster init --auth-admin admin > admin.out    # auth on; the admin token, once
  cairn cluster init --node 1=10.0.0.1:7401,10.0.0.1:7501 --node 2=10.0.0.2:7401,10.0.0.2:7501
  cairn cluster join --id 4 --client-addr 127.0.0.1:7404 --peer-addr 127.0.0.1:7504
  cairn cluster remove --id 4
  cairn cluster compact                 # every endpoint: forgotten bytes physically gone
  cairn cluster health                  # exit 0 only if every endpoint is healthy";

pub const AUTH_HELP: &str = "\
Examples:
  cairn auth enable --admin admin            # prints the admin token once
  cairn --json auth enable --admin admin | jq -r .token > admin.token && chmod 600 admin.token
  cairn auth principal add agent-7 --grant notes/agent-7/=read,write --grant =read
  cairn auth grant agent-7 --grant notes/=read,write,forget
  cairn auth principal rotate agent-7
  cairn auth whoami
Grants: PREFIX=PERM[,PERM...] with PERM read, write, forget, revoke or admin (admin only
with the empty prefix: --grant =admin). An empty PREFIX covers every key; the text is
split at its last '=', so a prefix may contain one.";

pub const AUTH_PRINCIPAL_HELP: &str = "\
Examples:
  cairn auth principal add agent-7 --grant notes/agent-7/=read,write --grant =read
  cairn --json auth principal add ci --grant builds/=read,write | jq -r .token > ci.token
  cairn auth principal rotate agent-7    # new token; the old one stops at once
  cairn auth principal delete agent-7
  cairn auth principal list
A token is printed once, by the command that makes it: the cluster keeps only its hash.";

pub const AUTH_GRANT_HELP: &str = "\
Examples:
  cairn auth grant agent-7 --grant notes/=read,write --grant facts/=read
  cairn auth grant agent-7 --grant =read      # read every key, nothing else
  cairn auth grant agent-7 --none             # no grant at all
Replaces every grant of the principal. PREFIX=PERM[,PERM...]: PERM is read, write,
forget, revoke or admin; an empty PREFIX covers every key.";
