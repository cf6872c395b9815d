-- Price per GPU-hour per node and day: the node's amortized cost (EffectiveCost) / (GPUs x billed
-- hours), or the price book (an on-prem entry's own rate or amortized hardware + power). billed_node_cost keeps what the invoice says (0 for hours a
-- commitment covered).
with nodes as (

    select * from {{ ref('int_gpu_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }}

),

billing as (

    -- the node's billing pieces of the day; repeated rows are exceptions, not prices
    select * from {{ ref('int_billing_nodes') }}
    where day between {{ var('day_from') }} and {{ var('day_to') }} and not is_duplicate

),

node_cost as (

    select day, hostname, currency, sum(effective_cost) as node_cost, sum(billed_cost) as billed_node_cost
    from billing
    group by day, hostname, currency

),

up_since as (

    -- the node's observed start, where the inventory says it joined during the day: the Node
    -- object's creationTimestamp of the first instance the name stood for (NULL when unknown)
    select
        n.day,
        n.hostname,
        case when count(*) filter (where i.created_at is null) = 0 then min(i.created_at) end as up_since
    from nodes as n, unnest(n.instances) as u(i)
    group by n.day, n.hostname

),

periods as (

    -- several rows (instance, disk, hourly and daily) cover the same hours: count the union once
    select distinct day, hostname, currency, day_period_start as s, day_period_end as e from billing

),

marked as (

    select
        *,
        max(e) over (partition by day, hostname, currency order by s, e
                     rows between unbounded preceding and 1 preceding) as prev_end
    from periods

),

islands as (

    select
        *,
        sum(case when prev_end is null or s > prev_end then 1 else 0 end)
            over (partition by day, hostname, currency order by s, e rows unbounded preceding) as island
    from marked

),

instance_periods as (

    -- a node's hours come from the instance-hour rows (ConsumedQuantity in hours) when it has any:
    -- per instance and charge period, the hours the instance ran in it: per SKU the sum of its
    -- rows' ConsumedQuantity (an hour split between a commitment and on demand; two instances
    -- under one ResourceId, as GCP names a re-created instance), then the smallest over the SKUs
    -- (one instance's GPU, cores and RAM of the same hour count once), capped by the period's
    -- length: a daily row of a spot node reclaimed after 12 h says 12, a partial last hour before
    -- a replacement 0.5
    select
        day, hostname, currency, instance, s, e,
        least(min(sku_hours), epoch(e - s) / 3600.0) as hours
    from (
        select
            day, hostname, currency,
            coalesce(resource_key, resource_id, lower(resource_name)) as instance,
            day_period_start as s, day_period_end as e, sku_id,
            sum(consumed_hours) as sku_hours
        from billing
        where consumed_hours > 0
        group by all
    )
    group by day, hostname, currency, instance, s, e

),

instance_hours as (

    -- a node replaced under the same name: the instances' hours add up (old instance 00-09:30, new
    -- 09:30-24: 24 h), capped below by the union of the node's periods (an overlap counts once)
    select day, hostname, currency, sum(least(hours, instance_span)) as hours
    from (
        select day, hostname, currency, instance, sum(hours) as hours,
               (max(epoch(e)) - min(epoch(s))) / 3600.0 as instance_span
        from instance_periods
        group by day, hostname, currency, instance
    )
    group by day, hostname, currency

),

node_hours as (

    -- without instance-hour rows (a scale set's row counts every instance; a node billed in other
    -- units): the union of the node's charge periods on the day from its observed start (a node
    -- created at 12:00 on a daily row without hours: 12 h), else the whole union
    select u.day, u.hostname, u.currency,
           -- (least() skips NULL in DuckDB: no instance hours is no instance hours)
           coalesce(case when h.hours is not null then least(h.hours, u.period_hours) end,
                    nullif(u.observed_hours, 0), u.period_hours) as billed_hours
    from (
        select x.day, x.hostname, x.currency,
               sum(epoch(x.island_end - x.island_start)) / 3600.0 as period_hours,
               sum(greatest(epoch(x.island_end)
                            - greatest(epoch(x.island_start), coalesce(epoch(o.up_since), epoch(x.island_start))),
                            0)) / 3600.0 as observed_hours
        from (
            select day, hostname, currency, island, min(s) as island_start, max(e) as island_end
            from islands group by day, hostname, currency, island
        ) as x
        left join up_since as o on o.day = x.day and o.hostname = x.hostname
        group by x.day, x.hostname, x.currency
    ) as u
    left join instance_hours as h on h.day = u.day and h.hostname = u.hostname and h.currency = u.currency

),

billed as (

    select
        n.day,
        n.hostname,
        n.gpus,
        n.model_name,
        n.provider,
        n.has_telemetry,
        n.in_inventory,
        h.billed_hours as node_hours,
        c.node_cost,
        c.billed_node_cost,
        c.currency,
        'billing' as price_source,
        cast(null as varchar) as price_book_source,
        cast(null as varchar) as price_book_as_of,
        cast(null as varchar) as price_book_basis
    from nodes as n
    inner join node_cost as c on c.day = n.day and c.hostname = n.hostname
    inner join node_hours as h on h.day = c.day and h.hostname = c.hostname and h.currency = c.currency

),

book as (

    -- an entry's price per GPU-hour: its own, or (on-prem) amortized hardware + power:
    -- hardware_cost_per_gpu / (amortization_months x 730 h) + watts_per_gpu / 1000 x pue x
    -- power_price_per_kwh, rounded once to 1e-6
    select
        *,
        case when price_per_gpu_hour is not null then 'explicit' else 'amortized' end as basis,
        cast(coalesce(
            cast(price_per_gpu_hour as decimal(18, 6)),
            cast(hardware_cost_per_gpu as double) / (cast(amortization_months as double) * 730.0)
            + coalesce(cast(watts_per_gpu as double) / 1000.0 * cast(pue as double)
                       * cast(power_price_per_kwh as double), 0)
        ) as decimal(18, 6)) as book_price,
        split_part(node_label, '=', 1) as label_key,
        substr(node_label, strpos(node_label, '=') + 1) as label_value
    from {{ ref('price_book') }}

),

unbilled as (

    -- no billing row: priced from the book when the node is known to exist that day (inventory
    -- or the day's own samples), never from samples loaded under another day alone. An on-prem
    -- entry prices only a node no cloud claims (provider NULL) that carries its label; it has
    -- priority 0, so it wins over the list prices for the hardware it names
    select
        n.*,
        b.book_price,
        b.currency,
        b.source,
        b.as_of,
        b.applies_to,
        b.basis
    from nodes as n
    inner join book as b on n.model_name ilike b.model_pattern
        and (b.applies_to = 'any'
             or (b.applies_to = 'on_prem' and n.provider is null
                 and json_extract_string(n.labels, b.label_key) = b.label_value))
    anti join node_cost as c on c.day = n.day and c.hostname = n.hostname
    where n.has_telemetry or n.in_inventory
    qualify row_number() over (partition by n.day, n.hostname order by b.priority) = 1

),

fallback as (

    select
        day,
        hostname,
        gpus,
        model_name,
        provider,
        has_telemetry,
        in_inventory,
        cast({{ var('fallback_node_hours') }} as double) as node_hours,
        cast(book_price * gpus * cast({{ var('fallback_node_hours') }} as integer) as decimal(18, 6)) as node_cost,
        cast(null as decimal(38, 6)) as billed_node_cost,
        currency,
        'price_book' as price_source,
        source as price_book_source,
        as_of as price_book_as_of,
        case when applies_to = 'on_prem' then 'on_prem_' || basis else 'list' end as price_book_basis
    from unbilled

),

priced as (

    select * from billed
    union all
    select * from fallback

),

final as (

    select
        day,
        hostname,
        gpus,
        model_name,
        provider,
        has_telemetry,
        in_inventory,
        node_hours,
        gpus * node_hours as capacity_gpu_hours,
        node_cost,
        billed_node_cost,
        currency,
        cast(round(cast(node_cost as double) / nullif(gpus * node_hours, 0), 6) as decimal(18, 6))
            as price_per_gpu_hour,
        price_source,
        price_book_source,
        price_book_as_of,
        price_book_basis
    from priced

)

select * from final
