-- Every wait for admission: it starts at submission, or at the requeue after a preemption, and
-- ends at the next admission. A wait not yet admitted is open and counted to the snapshot's last
-- event (the ledger as of its snapshot). An admission without a wait before it (a relaunch after
-- a start timeout) starts none.
with events as (

    select request_id, seq, event, event_at, flavor, reason_code
    from {{ ref('stg_request_events') }}
    where event in ('submitted', 'requeued', 'admitted', 'waiting', 'rejected')

),

numbered as (

    select
        *,
        sum(case when event in ('submitted', 'requeued') then 1 else 0 end)
            over (partition by request_id order by seq rows unbounded preceding) as wait_no
    from events

),

waits as (

    select
        request_id,
        wait_no,
        min(event_at) filter (where event in ('submitted', 'requeued')) as wait_start,
        min(event_at) filter (where event = 'admitted') as admitted_at,
        min(event_at) filter (where event = 'rejected') as rejected_at,
        arg_min(flavor, seq) filter (where event = 'admitted') as flavor_name,
        -- why it waited last before its admission (or until now)
        arg_max(reason_code, seq) filter (where event = 'waiting') as last_reason_code
    from numbered
    where wait_no > 0
    group by request_id, wait_no

),

snapshot as (

    select max(event_at) as snapshot_at from {{ ref('stg_request_events') }}

),

final as (

    select
        w.request_id,
        w.wait_no,
        r.lane,
        r.team,
        r.site,
        w.flavor_name,
        w.wait_start,
        w.admitted_at,
        coalesce(w.admitted_at, w.rejected_at, s.snapshot_at) as wait_end,
        w.admitted_at is null and w.rejected_at is null as open,
        w.last_reason_code,
        epoch(coalesce(w.admitted_at, w.rejected_at, s.snapshot_at) - w.wait_start) as wait_s
    from waits as w
    inner join {{ ref('stg_requests') }} as r on r.request_id = w.request_id
    cross join snapshot as s
    where w.wait_start is not null

)

select * from final
