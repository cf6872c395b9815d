-- The billed cost of cloud volumes behind PersistentVolumes allocated to the pods that mounted them
-- (PVC -> PV -> ResourceId), over time: a volume's EffectiveCost of the day is spread evenly over its
-- billed hours (first to last billed moment of the day); each hour's cost is split equally between
-- the pods mounting its claim then (OpenCost's rule for a shared claim), and the hours no pod mounted
-- it are the volume's unmounted cost (pod '(unmounted)', a named part of shared cost). A pod of a
-- known request pays for its request's team and lane; another pod the team owning its namespace
-- (lane '(namespace)'); else nobody, and its part stays shared cost like the unmounted hours.
with billing as (

    select * from {{ ref('int_billing_classes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and billing_class = 'shared'

),

volumes as (

    -- a name re-used by a new volume: the newest observation
    select * from {{ ref('stg_volumes') }}
    where claim_name is not null
    qualify row_number() over (partition by volume order by snapshot_at desc, uid) = 1

),

candidates as (

    -- provider identity (aws:vol-..., gce-disk:..., an Azure disk's ARM id), then ResourceId = the
    -- volume handle, then ResourceName = the PV's name or handle (a GCE in-tree pdName)
    select b.day, b.source, b.source_row, v.volume, 1 as rule_rank
    from billing as b inner join volumes as v on b.resource_key is not null and v.volume_key = b.resource_key
    union all
    select b.day, b.source, b.source_row, v.volume, 2
    from billing as b inner join volumes as v on v.volume_handle = b.resource_id
    union all
    select b.day, b.source, b.source_row, v.volume, 3
    from billing as b inner join volumes as v
        on lower(b.resource_name) = lower(v.volume) or lower(b.resource_name) = v.volume_handle

),

matched as (

    {{ best_candidate('volume', 'volume') }}

),

volume_cost as (

    select
        m.day,
        m.volume,
        m.currency,
        sum(m.effective_cost) as volume_cost,
        min(m.day_period_start) as billed_from,
        max(m.day_period_end) as billed_to,
        any_value(m.resource_id) as resource_id
    from matched as m
    group by m.day, m.volume, m.currency

),

mounts as (

    select
        c.day,
        c.volume,
        c.currency,
        p.namespace,
        p.pod,
        p.request_id,
        greatest(p.started_at, c.billed_from) as mount_from,
        least(coalesce(p.ended_at, c.billed_to), c.billed_to) as mount_to
    from volume_cost as c
    inner join volumes as v on v.volume = c.volume
    inner join {{ ref('stg_pods') }} as p
        on p.namespace = v.claim_namespace and list_contains(p.volume_claims, v.claim_name)
        and p.started_at < c.billed_to and coalesce(p.ended_at, c.billed_to) > c.billed_from

),

bounds as (

    select day, volume, billed_from as t from volume_cost
    union
    select day, volume, billed_to from volume_cost
    union
    select day, volume, mount_from from mounts
    union
    select day, volume, mount_to from mounts

),

segments as (

    -- the day's billed period cut wherever a pod starts or stops mounting the volume
    select day, volume, t as seg_from, lead(t) over (partition by day, volume order by t) as seg_to
    from bounds
    qualify seg_to is not null

),

segment_pods as (

    select s.day, s.volume, s.seg_from, s.seg_to, count(m.pod) as pods
    from segments as s
    left join mounts as m
        on m.day = s.day and m.volume = s.volume and m.mount_from <= s.seg_from and m.mount_to >= s.seg_to
    group by all

),

pod_hours as (

    select
        m.day, m.volume, m.currency, m.namespace, m.pod, m.request_id,
        sum(epoch(s.seg_to - s.seg_from)) / 3600.0 as mounted_hours,
        sum(epoch(s.seg_to - s.seg_from) / s.pods) / 3600.0 as hours_share
    from mounts as m
    inner join segment_pods as s
        on s.day = m.day and s.volume = m.volume and m.mount_from <= s.seg_from and m.mount_to >= s.seg_to
    group by all

),

priced as (

    select
        h.*,
        cast(round(cast(c.volume_cost as double) * h.hours_share / (epoch(c.billed_to - c.billed_from) / 3600.0), 6)
             as decimal(18, 6)) as cost
    from pod_hours as h
    inner join volume_cost as c on c.day = h.day and c.volume = h.volume and c.currency = h.currency
    where c.billed_to > c.billed_from

),

unmounted as (

    -- what no pod mounted (exactly the remainder, so the volume's parts add up to its cost)
    select
        c.day, c.volume, c.currency,
        coalesce(v.claim_namespace, '') as namespace,
        '(unmounted)' as pod,
        cast(null as varchar) as request_id,
        0.0 as mounted_hours,
        0.0 as hours_share,
        cast(c.volume_cost - coalesce(sum(p.cost), 0) as decimal(18, 6)) as cost
    from volume_cost as c
    inner join volumes as v on v.volume = c.volume
    left join priced as p on p.day = c.day and p.volume = c.volume and p.currency = c.currency
    group by c.day, c.volume, c.currency, v.claim_namespace, c.volume_cost
    having c.volume_cost - coalesce(sum(p.cost), 0) <> 0

),

owners as (

    {{ namespace_owners() }}

),

final as (

    select
        p.day,
        p.volume,
        c.resource_id,
        p.namespace,
        p.pod,
        p.request_id,
        {{ pod_owner(unmounted=true) }}
        p.currency,
        p.mounted_hours,
        p.hours_share,
        p.cost
    from (select * from priced union all by name select * from unmounted) as p
    inner join volume_cost as c on c.day = p.day and c.volume = p.volume and c.currency = p.currency
    left join {{ ref('stg_requests') }} as r on r.request_id = p.request_id
    left join owners as o on o.namespace = p.namespace

)

select * from final
