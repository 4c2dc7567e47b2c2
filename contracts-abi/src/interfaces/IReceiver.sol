// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC165} from "@openzeppelin/contracts/utils/introspection/IERC165.sol";

/// @title IReceiver
/// @notice Chainlink CRE / Keystone report consumer (same selector as Chainlink's keystone IReceiver).
/// @dev Implementations must report support for this interface through ERC-165; the forwarder
///      checks it before delivering.
interface IReceiver is IERC165 {
    /// @param metadata 64 bytes: workflowId (32) | workflowName (10) | workflowOwner (20) | reportId (2).
    /// @param report Workflow report body.
    function onReport(bytes calldata metadata, bytes calldata report) external;
}
