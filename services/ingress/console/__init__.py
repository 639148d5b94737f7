"""The operator console at `/ui`: server-rendered pages over the ledger's read model, live
updates over Server-Sent Events read from the partitions' event streams (XREAD, no consumer
group), and HTML forms that send the same ledger commands as the HTTP routes. Owns nothing
durable; sessions are signed cookies."""
