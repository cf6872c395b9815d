-- Stretches of time a multi-node request waited while GPUs of a flavor were free but not as the
-- whole nodes it needs. The node-aware gate says so on the request's `waiting` event
-- (gpu_platform/admission/nodes.py: "17 GPUs free in h100 but only 1 node(s) have 8 free (needs 2
-- nodes of 8)"); the ledger records a waiting event only when the reason changes, so each one holds
-- until the request's next state event, or the snapshot's last event while it still waits.
with events as (

    select request_id, seq, event, event_at, reason
    from {{ ref('stg_request_events') }}
    where event not in ('cluster', 'approved')

),

stretches as (

    select
        *,
        lead(event_at) over (partition by request_id order by seq) as next_event_at
    from events

),

snapshot as (

    select max(event_at) as snapshot_at from {{ ref('stg_request_events') }}

),

matched as (

    -- the first flavor the reason names as fragmented (a request of several flavors lists each)
    select
        s.*,
        regexp_extract(
            s.reason,
            '([0-9.]+) GPUs free in ([^ ]+) but (no node has|only [0-9]+ node\(s\) have) ([0-9.]+) free \(needs ([0-9]+) nodes of',
            ['free', 'flavor', 'nodes_free', 'per_node', 'nodes']
        ) as m
    from stretches as s
    where s.event = 'waiting' and s.reason like '%GPUs free in % free (needs % nodes of%'

),

final as (

    select
        w.request_id,
        r.lane,
        r.team,
        w.m.flavor as flavor_name,
        cast(w.m.free as double) as free_gpus,
        cast(w.m.per_node as double) as gpus_per_node,
        cast(w.m.nodes as integer) as nodes_needed,
        w.event_at as waiting_from,
        coalesce(w.next_event_at, n.snapshot_at) as waiting_to,
        w.next_event_at is null as still_waiting
    from matched as w
    cross join snapshot as n
    left join {{ ref('stg_requests') }} as r on r.request_id = w.request_id
    where w.m.flavor <> ''

)

select * from final
