/** Spend permissions of a merchant (the spender) as subscription rows, beside the module allocations. */
import type { Sql } from "../../../db/client";
import type { SubscriptionRecordObject } from "../../../domain/records";
import { toPermissionRecord, type PermissionRecordRow } from "../../../domain/spend-permission-record";
import { permissionNow, permissionRecordColumns, permissionStatusSql } from "../../../domain/spend-permission-status";
import { permissionRenewalJoins, renewalColumn } from "../../../renewals/sql";
import type { SubscriptionStatus } from "../../../domain/status";
import { DEADLINE_FAST_MS, DEADLINE_LIST_MS, withDeadline } from "../../deadline";

/** A permission row as the list selects it: the record's columns, its creation position and token decimals. */
export type PermissionRow = PermissionRecordRow & {
  block_number: string;
  log_index: number;
  token_decimals: number | null;
};

function columns(sql: Sql) {
  return sql`${permissionRecordColumns(sql)}, ${renewalColumn(sql)}`;
}

/** A merchant's permissions in creation order after `after`, `rows` at most. */
export function selectPermissions(
  sql: Sql,
  q: {
    merchant: string;
    chainId: number;
    status?: SubscriptionStatus;
    after?: { blockNumber: string; logIndex: number };
    maxBlock?: string;
  },
  rows: number | undefined,
): Promise<PermissionRow[]> {
  return withDeadline(
    sql<PermissionRow[]>`
      select ${columns(sql)}, tk.decimals as token_decimals
      from spend_permissions sp
      cross join ${permissionNow(sql, q.chainId)}
      ${permissionRenewalJoins(sql)}
      left join tokens tk on tk.chain_id = sp.chain_id and tk.address = sp.token
      where sp.merchant = ${q.merchant} and sp.chain_id = ${q.chainId}
      ${q.maxBlock !== undefined ? sql`and sp.block_number <= ${q.maxBlock}::bigint` : sql``}
      ${q.after ? sql`and (sp.block_number, sp.log_index) > (${q.after.blockNumber}::bigint, ${q.after.logIndex}::int)` : sql``}
      ${q.status ? sql`and ${permissionStatusSql(sql)} = ${q.status}` : sql``}
      order by sp.block_number, sp.log_index
      ${rows ? sql`limit ${rows}` : sql``}`,
    DEADLINE_LIST_MS,
  );
}

/** One permission of the merchant by uint256(hash), or undefined (unknown, or another spender's). */
export async function getPermission(
  sql: Sql,
  q: { merchant: string; chainId: number; subscriptionId: string },
): Promise<PermissionRow | undefined> {
  const [row] = await withDeadline(
    sql<PermissionRow[]>`
      select ${columns(sql)}, null::int as token_decimals
      from spend_permissions sp cross join ${permissionNow(sql, q.chainId)}
      ${permissionRenewalJoins(sql)}
      where sp.chain_id = ${q.chainId} and sp.subscription_id = ${q.subscriptionId} and sp.merchant = ${q.merchant}`,
    DEADLINE_FAST_MS,
  );
  return row;
}

/** Creation position of a permission of the merchant under `manager` (for `starting_after`), or undefined. */
export async function permissionPosition(
  sql: Sql,
  q: { merchant: string; chainId: number; module: string; subscriptionId: string },
): Promise<{ blockNumber: string; logIndex: number } | undefined> {
  const [row] = await withDeadline(
    sql<{ block_number: string; log_index: number }[]>`
      select block_number, log_index from spend_permissions
      where chain_id = ${q.chainId} and subscription_id = ${q.subscriptionId}
        and manager = ${q.module} and merchant = ${q.merchant}`,
    DEADLINE_FAST_MS,
  );
  return row && { blockNumber: row.block_number, logIndex: row.log_index };
}

/** The API record of a permission row. */
export function toPermissionSubscriptionRecord(r: PermissionRow): SubscriptionRecordObject {
  return toPermissionRecord(r);
}
