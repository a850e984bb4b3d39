-- Renewal outlooks of spend permissions: a permission's charge also fails when the spend permission manager is no
-- longer an owner of the subscriber's smart account (`ManagerNotOwner`). Permissions keep their outlooks in the same
-- table, keyed by uint256(hash) as every table keyed by subscription id.
alter table renewal_outlooks drop constraint renewal_outlooks_reason_check;
alter table renewal_outlooks add constraint renewal_outlooks_reason_check
  check (reason in ('AllowanceExpired', 'InsufficientAllowance', 'InsufficientBalance', 'ManagerNotOwner'));
